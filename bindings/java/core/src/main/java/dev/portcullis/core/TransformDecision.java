package dev.portcullis.core;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The call proceeds with the operations applied to the context, in order.
 *
 * @param operations the operations, unmodifiable
 */
public record TransformDecision(List<Operation> operations) implements PolicyDecision {
    /**
     * A transform decision.
     *
     * @param operations the operations
     */
    public TransformDecision {
        operations = List.copyOf(Objects.requireNonNull(operations, "operations"));
    }

    /**
     * Transform.
     *
     * @param operations the operations
     * @return the decision
     */
    public static TransformDecision transform(List<Operation> operations) {
        return new TransformDecision(operations);
    }

    /**
     * Transform.
     *
     * @param operations the operations
     * @return the decision
     */
    public static TransformDecision transform(Operation... operations) {
        return new TransformDecision(List.of(operations));
    }

    @Override
    public String decision() {
        return "transform";
    }

    @Override
    public Map<String, Object> toMap() {
        List<Object> list = new ArrayList<>();
        for (Operation operation : operations) {
            list.add(operation.toMap());
        }
        Map<String, Object> transformation = new LinkedHashMap<>();
        transformation.put("operations", list);
        Map<String, Object> map = new LinkedHashMap<>();
        map.put("decision", "transform");
        map.put("transformation", transformation);
        return map;
    }
}
