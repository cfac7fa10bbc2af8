package dev.portcullis.core;

/**
 * Receives the audit record of every decision, on the thread that called the engine, before
 * the call returns or throws. An exception it throws reaches that caller.
 */
@FunctionalInterface
public interface AuditHandler {
    /**
     * Handles one record.
     *
     * @param record the record
     */
    void handle(AuditRecord record);
}
