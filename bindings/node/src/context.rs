//! Contexts as JavaScript hands them over: JSON, read into the engine's types.

pub use portcullis_bindings::read_context;
