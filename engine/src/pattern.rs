//! Regular expressions from decisions and rules: compiled with size limits, and cached.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use regex::{Regex, RegexBuilder};

/// Largest compiled size of a redaction pattern.
pub const PATTERN_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a redaction pattern with size limits, reusing recent compilations.
///
/// Patterns come from decisions, possibly from remote services, so the caches are bounded:
/// each is emptied when it reaches [`PATTERN_CACHE_CAPACITY`] entries. Each thread keeps the
/// patterns it used in a cache of its own, so a pattern used before on the thread is found
/// without a lock; a pattern new to the thread is looked up in a cache shared by all threads
/// (compiled once for all of them), and compiled only when it is new there too.
pub fn cached_regex(pattern: &str) -> Result<Arc<Regex>, String> {
    thread_local! {
        static LOCAL: RefCell<HashMap<Box<str>, Arc<Regex>>> = RefCell::new(HashMap::new());
        /// The pattern used last on the thread: most callers use one pattern again and again,
        /// and comparing it costs less than hashing it.
        static LAST: RefCell<Option<Arc<Regex>>> = const { RefCell::new(None) };
    }
    static SHARED: LazyLock<Mutex<HashMap<String, Arc<Regex>>>> =
        LazyLock::new(|| Mutex::new(HashMap::new()));
    let last = LAST.with(|last| {
        last.borrow()
            .as_ref()
            .filter(|regex| regex.as_str() == pattern)
            .map(Arc::clone)
    });
    if let Some(regex) = last {
        return Ok(regex);
    }
    let remember = |regex: &Arc<Regex>| {
        LAST.with(|last| *last.borrow_mut() = Some(Arc::clone(regex)));
    };
    if let Some(regex) = LOCAL.with(|local| local.borrow().get(pattern).cloned()) {
        remember(&regex);
        return Ok(regex);
    }
    let shared = SHARED
        .lock()
        .ok()
        .and_then(|cache| cache.get(pattern).cloned());
    let regex = match shared {
        Some(regex) => regex,
        None => {
            let regex = Arc::new(compile_pattern(pattern)?);
            if let Ok(mut cache) = SHARED.lock() {
                if cache.len() >= PATTERN_CACHE_CAPACITY {
                    cache.clear();
                }
                cache.insert(pattern.to_owned(), Arc::clone(&regex));
            }
            regex
        }
    };
    LOCAL.with(|local| {
        let mut local = local.borrow_mut();
        if local.len() >= PATTERN_CACHE_CAPACITY {
            local.clear();
        }
        local.insert(pattern.into(), Arc::clone(&regex));
    });
    remember(&regex);
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
