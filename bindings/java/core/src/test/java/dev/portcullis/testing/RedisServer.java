package dev.portcullis.testing;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Optional;

/**
 * A real {@code redis-server} on a free port of 127.0.0.1, without persistence, killed when
 * closed. {@link #start()} is empty when it cannot be started (the test then skips), unless
 * {@code PORTCULLIS_REQUIRE_REDIS} is set (the test command sets it), which fails instead.
 */
public final class RedisServer implements AutoCloseable {
    private final Process process;
    private final int port;

    private RedisServer(Process process, int port) {
        this.process = process;
        this.port = port;
    }

    /** Starts one and waits until it answers {@code PING}. */
    public static Optional<RedisServer> start() throws IOException, InterruptedException {
        boolean required = !"0".equals(System.getenv().getOrDefault("PORTCULLIS_REQUIRE_REDIS", "0"));
        int port;
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = probe.getLocalPort();
        }
        Process process;
        try {
            process = new ProcessBuilder("redis-server", "--bind", "127.0.0.1", "--port", String.valueOf(port),
                            "--save", "", "--appendonly", "no")
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD)
                    .redirectError(ProcessBuilder.Redirect.DISCARD)
                    .start();
        } catch (IOException error) {
            if (required) {
                throw new IllegalStateException("redis-server cannot be started (scripts/test installs it)", error);
            }
            return Optional.empty();
        }
        RedisServer server = new RedisServer(process, port);
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (!server.answers()) {
            if (System.nanoTime() > deadline) {
                server.close();
                throw new IllegalStateException("redis-server did not answer within 10 s");
            }
            Thread.sleep(20);
        }
        return Optional.of(server);
    }

    /** {@code redis://127.0.0.1:<port>/0}. */
    public String url() {
        return "redis://127.0.0.1:" + port + "/0";
    }

    private boolean answers() {
        try (Socket socket = new Socket(InetAddress.getLoopbackAddress(), port)) {
            socket.setSoTimeout(1000);
            OutputStream out = socket.getOutputStream();
            out.write("PING\r\n".getBytes(StandardCharsets.US_ASCII));
            out.flush();
            InputStream in = socket.getInputStream();
            byte[] answer = new byte[5];
            int read = in.readNBytes(answer, 0, answer.length);
            return read == 5 && "+PONG".equals(new String(answer, StandardCharsets.US_ASCII));
        } catch (IOException notYet) {
            return false;
        }
    }

    @Override
    public void close() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor();
    }
}
