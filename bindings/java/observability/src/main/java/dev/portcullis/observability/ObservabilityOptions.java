package dev.portcullis.observability;

import dev.portcullis.core.internal.Json;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The observability platform's settings: a public key and a secret key (HTTP Basic user and
 * password), and its address (default {@code https://cloud.langfuse.com}). Built with
 * {@link #builder()}.
 */
public final class ObservabilityOptions {
    private final String publicKey;
    private final String secretKey;
    private final String baseUrl;

    private ObservabilityOptions(Builder builder) {
        this.publicKey = builder.publicKey;
        this.secretKey = builder.secretKey;
        this.baseUrl = builder.baseUrl;
    }

    /**
     * A builder of options with nothing set.
     *
     * @return the builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * The options as the native library reads them.
     *
     * @return {@code public_key}, {@code secret_key}, {@code base_url} (those set), as JSON
     */
    String toJson() {
        Map<String, Object> map = new LinkedHashMap<>();
        if (publicKey != null) {
            map.put("public_key", publicKey);
        }
        if (secretKey != null) {
            map.put("secret_key", secretKey);
        }
        if (baseUrl != null) {
            map.put("base_url", baseUrl);
        }
        return Json.write(map);
    }

    /** Builds {@link ObservabilityOptions}. */
    public static final class Builder {
        private String publicKey;
        private String secretKey;
        private String baseUrl;

        private Builder() {}

        /**
         * Sets the public key.
         *
         * @param publicKey the key (HTTP Basic user)
         * @return this builder
         */
        public Builder publicKey(String publicKey) {
            this.publicKey = publicKey;
            return this;
        }

        /**
         * Sets the secret key.
         *
         * @param secretKey the key (HTTP Basic password)
         * @return this builder
         */
        public Builder secretKey(String secretKey) {
            this.secretKey = secretKey;
            return this;
        }

        /**
         * Sets the platform's address.
         *
         * @param baseUrl the address (default {@code https://cloud.langfuse.com})
         * @return this builder
         */
        public Builder baseUrl(String baseUrl) {
            this.baseUrl = baseUrl;
            return this;
        }

        /**
         * The options.
         *
         * @return the options
         */
        public ObservabilityOptions build() {
            return new ObservabilityOptions(this);
        }
    }
}
