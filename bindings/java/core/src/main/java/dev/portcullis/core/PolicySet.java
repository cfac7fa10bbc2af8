package dev.portcullis.core;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The policies of each point, run in the order given, and what to do when one cannot be
 * evaluated. Built with {@link #builder()}.
 */
public final class PolicySet {
    private final List<InputPolicy> input;
    private final List<ToolCallPolicy> toolCall;
    private final List<ToolResultPolicy> toolResult;
    private final List<OutputPolicy> output;
    private final OnErrorBehavior onError;

    private PolicySet(Builder builder) {
        this.input = List.copyOf(builder.input);
        this.toolCall = List.copyOf(builder.toolCall);
        this.toolResult = List.copyOf(builder.toolResult);
        this.output = List.copyOf(builder.output);
        this.onError = builder.onError;
    }

    /**
     * A builder of an empty set whose evaluation errors deny.
     *
     * @return the builder
     */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * The policies of the {@code input} point.
     *
     * @return them, in order
     */
    public List<InputPolicy> input() {
        return input;
    }

    /**
     * The policies of the {@code tool_call} point.
     *
     * @return them, in order
     */
    public List<ToolCallPolicy> toolCall() {
        return toolCall;
    }

    /**
     * The policies of the {@code tool_result} point.
     *
     * @return them, in order
     */
    public List<ToolResultPolicy> toolResult() {
        return toolResult;
    }

    /**
     * The policies of the {@code output} point.
     *
     * @return them, in order
     */
    public List<OutputPolicy> output() {
        return output;
    }

    /**
     * What a policy that cannot be evaluated does to the call.
     *
     * @return {@code DENY} (the default) or {@code ALLOW}
     */
    public OnErrorBehavior onError() {
        return onError;
    }

    /** Builds a {@link PolicySet}. */
    public static final class Builder {
        private final List<InputPolicy> input = new ArrayList<>();
        private final List<ToolCallPolicy> toolCall = new ArrayList<>();
        private final List<ToolResultPolicy> toolResult = new ArrayList<>();
        private final List<OutputPolicy> output = new ArrayList<>();
        private OnErrorBehavior onError = OnErrorBehavior.DENY;

        private Builder() {}

        private static <P> List<P> checked(List<? extends P> policies, String point) {
            Objects.requireNonNull(policies, point);
            for (P policy : policies) {
                Objects.requireNonNull(policy, "a policy of " + point + " is null");
            }
            return new ArrayList<>(policies);
        }

        /**
         * Sets the policies of the {@code input} point.
         *
         * @param policies the policies, in order
         * @return this builder
         */
        public Builder input(List<? extends InputPolicy> policies) {
            input.clear();
            input.addAll(checked(policies, "input"));
            return this;
        }

        /**
         * Sets the policies of the {@code tool_call} point.
         *
         * @param policies the policies, in order
         * @return this builder
         */
        public Builder toolCall(List<? extends ToolCallPolicy> policies) {
            toolCall.clear();
            toolCall.addAll(checked(policies, "tool_call"));
            return this;
        }

        /**
         * Sets the policies of the {@code tool_result} point.
         *
         * @param policies the policies, in order
         * @return this builder
         */
        public Builder toolResult(List<? extends ToolResultPolicy> policies) {
            toolResult.clear();
            toolResult.addAll(checked(policies, "tool_result"));
            return this;
        }

        /**
         * Sets the policies of the {@code output} point.
         *
         * @param policies the policies, in order
         * @return this builder
         */
        public Builder output(List<? extends OutputPolicy> policies) {
            output.clear();
            output.addAll(checked(policies, "output"));
            return this;
        }

        /**
         * Sets what a policy that cannot be evaluated does to the call.
         *
         * @param onError {@code DENY} (the default) or {@code ALLOW}
         * @return this builder
         */
        public Builder onError(OnErrorBehavior onError) {
            this.onError = Objects.requireNonNull(onError, "onError");
            return this;
        }

        /**
         * The set.
         *
         * @return the policy set
         */
        public PolicySet build() {
            return new PolicySet(this);
        }
    }
}
