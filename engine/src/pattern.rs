//! Regular expressions from decisions and rules: compiled with size limits, and cached.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use regex::{Regex, RegexBuilder};

/// Largest compiled size of a redaction pattern.
pub const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a redaction pattern with size limits, reusing recent compilations.
///
/// Patterns come from decisions, possibly from remote services, so the cache is bounded: it
/// is emptied when it reaches [`PATTERN_CACHE_CAPACITY`] entries.
pub fn cached_regex(pattern: &str) -> Result<Arc<Regex>, String> {
    static CACHE: LazyLock<Mutex<HashMap<String, Arc<Regex>>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    if let Ok(cache) = CACHE.lock()
        && let Some(regex) = cache.get(pattern)
    {
        return Ok(Arc::clone(regex));
    }
    let regex = Arc::new(compile_pattern(pattern)?);
    if let Ok(mut cache) = CACHE.lock() {
        if cache.len() >= PATTERN_CACHE_CAPACITY {
            cache.clear();
        }
        cache.insert(pattern.to_owned(), Arc::clone(&regex));
    }
    Ok(regex)
}

/// How many compiled redaction patterns [`cached_regex`] keeps.
pub const PATTERN_CACHE_CAPACITY: usize = 256;

/// Compiles a pattern with the size limits every user-supplied pattern gets.
///
/// The regex engine runs in time linear in the text whatever the pattern, so no pattern can
/// cause catastrophic backtracking; the limits bound the memory a pattern may take.
pub fn compile_pattern(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .size_limit(PATTERN_SIZE_LIMIT)
        .dfa_size_limit(4 * PATTERN_SIZE_LIMIT)
        .nest_limit(100)
        .build()
        .map_err(|error| format!("invalid pattern {pattern:?}: {error}"))
}
