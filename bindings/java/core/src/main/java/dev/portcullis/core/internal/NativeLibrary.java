package dev.portcullis.core.internal;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * Loads the native library once: the file named by the {@code portcullis.native.library} system
 * property when set, else the one inside the {@code core} jar
 * ({@code native/<os>-<arch>/libportcullis_java.so}), extracted to a temporary file.
 *
 * <p>Part of the binding's plumbing, not of its API: it may change in any release.
 */
public final class NativeLibrary {
    /** The system property naming a library file to load instead of the one in the jar. */
    public static final String PATH_PROPERTY = "portcullis.native.library";

    private static boolean loaded;

    private NativeLibrary() {}

    /**
     * Loads the library unless it is loaded already.
     *
     * @throws UnsatisfiedLinkError when there is no library for this platform, or it cannot be
     *     loaded
     */
    public static synchronized void load() {
        if (loaded) {
            return;
        }
        String path = System.getProperty(PATH_PROPERTY);
        if (path != null && !path.isEmpty()) {
            System.load(Path.of(path).toAbsolutePath().toString());
        } else {
            System.load(extract().toString());
        }
        loaded = true;
    }

    /**
     * Where the library for this platform is inside the jar.
     *
     * @return the resource's name
     */
    public static String resource() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        if (arch.equals("amd64") || arch.equals("x86_64")) {
            arch = "x86_64";
        } else if (arch.equals("arm64")) {
            arch = "aarch64";
        }
        String platform;
        String file;
        if (os.contains("linux")) {
            platform = "linux";
            file = "libportcullis_java.so";
        } else if (os.contains("mac")) {
            platform = "macos";
            file = "libportcullis_java.dylib";
        } else if (os.contains("windows")) {
            platform = "windows";
            file = "portcullis_java.dll";
        } else {
            platform = os.replace(' ', '_');
            file = "libportcullis_java.so";
        }
        return "/native/" + platform + "-" + arch + "/" + file;
    }

    private static Path extract() {
        String resource = resource();
        try (InputStream in = NativeLibrary.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new UnsatisfiedLinkError("the Portcullis jar has no native library for this platform ("
                        + resource + "); set -D" + PATH_PROPERTY + "=<path of libportcullis_java>");
            }
            Path file = Files.createTempFile("portcullis-", "-" + Path.of(resource).getFileName());
            file.toFile().deleteOnExit();
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            return file;
        } catch (IOException e) {
            UnsatisfiedLinkError error = new UnsatisfiedLinkError(
                    "cannot extract the Portcullis native library " + resource + ": " + e);
            error.initCause(e);
            throw error;
        }
    }
}
