//! Contexts as JavaScript hands them over: JSON, read into the engine's types.

use portcullis_engine::PolicyContext;

/// Reads a context of `C`'s point from JSON, saying what is wrong with it.
pub fn read_context<C: PolicyContext>(json: &str) -> std::result::Result<C, String> {
    serde_json::from_str(json).map_err(|error| format!("not a valid {} context: {error}", C::POINT))
}
