package dev.portcullis.rego;

import com.styra.opa.wasm.OpaPolicy;
import dev.portcullis.core.PolicyContext;
import dev.portcullis.core.PolicyDecision;
import dev.portcullis.core.internal.Fields;
import dev.portcullis.core.internal.Json;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.zip.GZIPInputStream;

/**
 * An OPA bundle evaluated on Styra's opa-java-wasm (a pure-Java OPA WebAssembly runtime on
 * Chicory), the way a Java program would use it without Portcullis: the bundle's
 * {@code policy.wasm}, its {@code data.json} as the data document, the entrypoint its
 * {@code .manifest} names, a context's JSON as the input (the same document the engine gives a
 * Rego policy: {@link PolicyContext#toJson()} is what the engine's Rego input writer writes for
 * the context), and the result set's value read as a decision. One instance is not for
 * concurrent use (neither is an {@link OpaPolicy}).
 */
final class OpaJavaWasm {
    private final OpaPolicy policy;
    final String entrypoint;

    /**
     * Loads a bundle ({@code .tar.gz}).
     *
     * @param bundle the bundle's file
     */
    OpaJavaWasm(Path bundle) {
        Map<String, byte[]> files = untar(bundle);
        byte[] wasm = files.get("policy.wasm");
        if (wasm == null || !files.containsKey(".manifest")) {
            throw new IllegalArgumentException(bundle + " has no policy.wasm or no .manifest");
        }
        Map<String, Object> manifest = Json.parseObject(utf8(files.get(".manifest")));
        List<Object> modules = Fields.list(manifest, "wasm", "the manifest");
        entrypoint = Fields.string(Fields.object(modules.get(0), "a module"), "entrypoint", "a module");
        policy = OpaPolicy.builder().withPolicy(wasm).build();
        if (files.containsKey("data.json")) {
            policy.data(utf8(files.get("data.json")));
        }
        policy.entrypoint(entrypoint);
    }

    /**
     * The raw result set for an input document.
     *
     * @param input the input's JSON
     * @return the result set's JSON ({@code [{"result": ...}]}, or {@code []} when undefined)
     */
    String evaluate(String input) {
        return policy.evaluate(input);
    }

    /**
     * What the bundle decides on a context: the context's JSON in, the result's value read as a
     * decision object ({@code {"decision": "deny", "reason": "..."}}).
     *
     * @param ctx the context
     * @return the decision
     */
    PolicyDecision decide(PolicyContext ctx) {
        List<?> resultSet = (List<?>) Json.parse(evaluate(ctx.toJson()));
        if (resultSet.isEmpty()) {
            throw new IllegalStateException(entrypoint + " is undefined for " + ctx.toJson());
        }
        return PolicyDecision.fromMap(Fields.object(resultSet.get(0), "a result").get("result"));
    }

    /** opa-java-wasm's version, from its jar's Maven properties. */
    static String version() {
        try (InputStream in = OpaPolicy.class.getResourceAsStream("/META-INF/maven/com.styra.opa/opa-java-wasm/pom.properties")) {
            Properties properties = new Properties();
            if (in != null) {
                properties.load(in);
            }
            return properties.getProperty("version", "(version unknown)");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The regular files of a gzipped tar, by name without a leading {@code /} or {@code ./}. */
    static Map<String, byte[]> untar(Path path) {
        Map<String, byte[]> files = new HashMap<>();
        try (InputStream in = new GZIPInputStream(Files.newInputStream(path))) {
            byte[] header = new byte[512];
            while (in.readNBytes(header, 0, 512) == 512 && header[0] != 0) {
                String name = field(header, 0, 100);
                String prefix = field(header, 345, 155);
                if (!prefix.isEmpty()) {
                    name = prefix + "/" + name;
                }
                long size = Long.parseLong(field(header, 124, 12).trim(), 8);
                byte type = header[156];
                byte[] body = in.readNBytes((int) size);
                in.skipNBytes((512 - size % 512) % 512);
                if (type == '0' || type == 0) {
                    while (name.startsWith("/") || name.startsWith("./")) {
                        name = name.substring(name.charAt(0) == '/' ? 1 : 2);
                    }
                    files.put(name, body);
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("reading " + path, e);
        }
        return files;
    }

    private static String field(byte[] header, int offset, int length) {
        int end = offset;
        while (end < offset + length && header[end] != 0) {
            end++;
        }
        return new String(header, offset, end - offset, StandardCharsets.UTF_8);
    }

    private static String utf8(byte[] bytes) {
        return new String(bytes, StandardCharsets.UTF_8);
    }
}
