package dev.portcullis.core.internal;

import java.lang.ref.Cleaner;

/**
 * The native methods of the JNI library. Points are passed as their index (0 {@code input},
 * 1 {@code tool_call}, 2 {@code tool_result}, 3 {@code output}); handles as {@code long}s.
 * Every method throws {@code IllegalArgumentException} for bad input and
 * {@code IllegalStateException} (or {@code RuntimeException}) for anything else that fails.
 *
 * <p>Part of the binding's plumbing, not of its API: it may change in any release.
 */
public final class Native {
    /** The cleaner that frees native handles once their Java owners are unreachable. */
    public static final Cleaner CLEANER = Cleaner.create();

    static {
        NativeLibrary.load();
    }

    private Native() {}

    /**
     * An empty policy set.
     *
     * @param onError {@code deny} or {@code allow}
     * @return its handle
     */
    public static native long policySetNew(String onError);

    /**
     * Adds a policy written in Java.
     *
     * @param set the set
     * @param point the point's index
     * @param id the policy's id
     * @param adapter its {@link HostPolicyAdapter}
     * @param deadlineMillis its deadline (0 or less: the default)
     */
    public static native void policySetAddJava(long set, int point, String id, Object adapter, long deadlineMillis);

    /**
     * Adds a native policy.
     *
     * @param set the set
     * @param point the point's index
     * @param policy the policy's handle
     */
    public static native void policySetAddNative(long set, int point, long policy);

    /**
     * Frees a policy set.
     *
     * @param set the set
     */
    public static native void policySetFree(long set);

    /**
     * An engine on a set (which cannot be used again).
     *
     * @param set the set
     * @param audit whether outcomes carry their audit records
     * @param sink a native audit sink's handle, or 0
     * @return the engine's handle
     */
    public static native long engineNew(long set, boolean audit, long sink);

    /**
     * The engine of a manifest.
     *
     * @param path the manifest's path
     * @param audit whether outcomes carry their audit records
     * @param sink a native audit sink's handle, or 0
     * @return the engine's handle
     */
    public static native long engineFromManifest(String path, boolean audit, long sink);

    /**
     * Evaluates a point on a context.
     *
     * @param engine the engine
     * @param point the point's index
     * @param context the caller's context, handed to Java policies while no policy changed it
     * @param contextJson the context, as JSON in UTF-8
     * @param thrown where the exception a Java policy threw is put, when it caused the outcome
     * @return the outcome as JSON in UTF-8, or {@code null} for
     *     {@code {"outcome":"forward","context":null}} (the context forwarded unchanged, no
     *     audit records)
     */
    public static native byte[] engineEvaluate(
            long engine, int point, Object context, byte[] contextJson, Throwable[] thrown);

    /**
     * Records that a person approved an action, for one call within a lifetime.
     *
     * @param engine the engine
     * @param actionDigest the action's digest (an approval request's {@code action_digest})
     * @param by who approved
     * @param ttlNanos the grant's lifetime in nanoseconds (positive)
     */
    public static native void engineGrant(long engine, String actionDigest, String by, long ttlNanos);

    /**
     * Frees an engine.
     *
     * @param engine the engine
     */
    public static native void engineFree(long engine);

    /**
     * A DSL policy.
     *
     * @param point the point's index
     * @param id the policy's id (the rule file's name without {@code .json})
     * @param dir the policy directory
     * @return its handle
     */
    public static native long dslPolicy(int point, String id, String dir);

    /**
     * A Rego policy on a compiled bundle.
     *
     * @param point the point's index
     * @param id the policy's id
     * @param bundle the bundle's path
     * @return its handle
     */
    public static native long regoPolicy(int point, String id, String bundle);

    /**
     * A policy on a Rego policy server.
     *
     * @param point the point's index
     * @param id the policy's id
     * @param optionsJson the client options ({@code base_url}, {@code timeout_ms}, {@code headers})
     * @param packagePath the package path
     * @return its handle
     */
    public static native long regoServerPolicy(int point, String id, String optionsJson, String packagePath);

    /**
     * A policy on a remote endpoint.
     *
     * @param point the point's index
     * @param id the policy's id
     * @param optionsJson the client options ({@code base_url}, {@code timeout_ms}, {@code headers})
     * @return its handle
     */
    public static native long httpPolicy(int point, String id, String optionsJson);

    /**
     * A native policy's id, point, problems and warnings.
     *
     * @param policy the policy
     * @return them as JSON
     */
    public static native String policyInfo(long policy);

    /**
     * A native policy's decision alone.
     *
     * @param policy the policy
     * @param contextJson the context
     * @return {@code {"decision": ..}} or {@code {"error": ..}}
     */
    public static native String policyEvaluate(long policy, String contextJson);

    /**
     * Frees a native policy.
     *
     * @param policy the policy
     */
    public static native void policyFree(long policy);

    /**
     * An observability platform exporter.
     *
     * @param settingsJson {@code public_key}, {@code secret_key}, {@code base_url}; {@code null}:
     *     the {@code OBS_*} variables
     * @return its handle
     */
    public static native long observabilitySink(String settingsJson);

    /**
     * Where an exporter posts its spans.
     *
     * @param sink the exporter
     * @return the address
     */
    public static native String sinkEndpoint(long sink);

    /**
     * Exports every span an exporter buffered.
     *
     * @param sink the exporter
     */
    public static native void sinkFlush(long sink);

    /**
     * Frees an exporter.
     *
     * @param sink the exporter
     */
    public static native void sinkFree(long sink);
}
