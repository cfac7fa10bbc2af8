package dev.portcullis.core.internal;

import dev.portcullis.core.AuditHandler;

/**
 * An audit handler that lives in the native library: an engine built with it hands it every
 * record there, without a call into Java.
 *
 * <p>Part of the binding's plumbing, not of its API: it may change in any release.
 */
public interface NativeAuditSink extends AuditHandler {
    /**
     * The native handler's handle.
     *
     * @return the handle
     */
    long sinkHandle();
}
