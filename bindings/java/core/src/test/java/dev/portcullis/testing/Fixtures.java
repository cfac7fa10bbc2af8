package dev.portcullis.testing;

import com.sun.net.httpserver.HttpServer;
import dev.portcullis.core.InputContext;
import dev.portcullis.core.Message;
import dev.portcullis.core.Metadata;
import dev.portcullis.core.OutputContext;
import dev.portcullis.core.ToolCallContext;
import dev.portcullis.core.ToolResultContext;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.function.BiFunction;

/** What the binding's tests share: where the fixtures are, contexts, and a loopback HTTP server. */
public final class Fixtures {
    private Fixtures() {}

    /** The repository's root (the tests run in a module's directory, bindings/java/<module>). */
    public static Path root() {
        return Path.of(System.getProperty("user.dir")).resolve("../../..").normalize();
    }

    /** The bindings' shared fixture table's folder (bindings/fixtures). */
    public static Path table() {
        return root().resolve("bindings/fixtures");
    }

    /** The real OPA-built fixtures: $PORTCULLIS_OPA_FIXTURES, else ../shared/fixtures beside the repository. */
    public static Path opa() {
        String set = System.getenv("PORTCULLIS_OPA_FIXTURES");
        Path path = set != null && !set.isEmpty() ? Path.of(set) : root().resolve("../shared/fixtures");
        if (!Files.isDirectory(path)) {
            throw new IllegalStateException("the OPA fixtures are not at " + path.toAbsolutePath().normalize()
                    + " (set PORTCULLIS_OPA_FIXTURES)");
        }
        return path.normalize();
    }

    /** A bundle of the shared OPA fixtures' rego-wasm folder. */
    public static Path bundle(String name) {
        return opa().resolve("rego-wasm").resolve(name);
    }

    /** The tests' metadata. */
    public static Metadata metadata() {
        return new Metadata("agent-1", "s-1", "2026-01-01T00:00:00Z", Map.of());
    }

    /** An input context of user messages. */
    public static InputContext input(String... contents) {
        List<Message> messages = new ArrayList<>();
        for (String content : contents) {
            messages.add(Message.user(content));
        }
        return new InputContext(messages, metadata());
    }

    /** A tool-call context. */
    public static ToolCallContext toolCall(String tool) {
        return new ToolCallContext(tool, Map.of("query", "weather"), Message.assistant("calling"), metadata());
    }

    /** A tool-result context. */
    public static ToolResultContext toolResult(String content) {
        return new ToolResultContext("web_search", Map.of("query", "weather"), content, null, false, metadata());
    }

    /** An output context. */
    public static OutputContext output(String content) {
        return new OutputContext(Message.assistant(content), metadata());
    }

    /** An HTTP server on a free loopback port answering each request with a handler. */
    public static final class JsonServer implements AutoCloseable {
        private final HttpServer server;
        /** The requests received: path and body. */
        public final List<String[]> requests = Collections.synchronizedList(new ArrayList<>());

        /**
         * Starts a server; {@code handle(path, body)} gives the status and the JSON body of
         * the answer ({@code {status, body}}).
         */
        public JsonServer(BiFunction<String, String, Object[]> handle) throws IOException {
            server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
            server.createContext("/", exchange -> {
                String body;
                try (InputStream in = exchange.getRequestBody()) {
                    body = new String(in.readAllBytes(), StandardCharsets.UTF_8);
                }
                String path = exchange.getRequestURI().getPath();
                requests.add(new String[] {path, body, String.valueOf(exchange.getRequestHeaders().getFirst("Authorization"))});
                Object[] answer = handle.apply(path, body);
                byte[] bytes = ((String) answer[1]).getBytes(StandardCharsets.UTF_8);
                exchange.getResponseHeaders().set("Content-Type", "application/json");
                exchange.sendResponseHeaders((Integer) answer[0], bytes.length == 0 ? -1 : bytes.length);
                try (OutputStream out = exchange.getResponseBody()) {
                    out.write(bytes);
                }
            });
            server.start();
        }

        /** The server's address ({@code http://127.0.0.1:<port>}). */
        public String baseUrl() {
            return "http://127.0.0.1:" + server.getAddress().getPort();
        }

        @Override
        public void close() {
            server.stop(0);
        }
    }
}
