//! Python values as JSON and back: contexts and decisions cross the boundary as the plain
//! dicts, lists, strings, numbers, booleans and `None` of §1 and §2.
//!
//! Reading a Python value is bounded by [`MAX_DEPTH`]: a structure nested deeper (or one that
//! contains itself) is refused with the path where it went too deep, never a stack overflow.

use std::borrow::Cow;
use std::fmt;

use portcullis_engine::{MAX_NESTING, PolicyContext};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{
    PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, dict::BoundDictIterator,
};
use serde::Deserialize;
use serde::de::value::{MapAccessDeserializer, StrDeserializer};
use serde::de::{DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Value;

/// Why a Python value is not JSON: what is wrong, and where (a dotted path, empty at the top).
#[derive(Debug)]
pub struct NotJson {
    path: Vec<String>,
    problem: String,
}

impl NotJson {
    fn new(problem: impl Into<String>) -> NotJson {
        NotJson {
            path: Vec::new(),
            problem: problem.into(),
        }
    }

    fn at(mut self, step: impl Into<String>) -> NotJson {
        self.path.push(step.into());
        self
    }

    /// The problem, with the path where it is (`metadata.tags.2: a set is not JSON`).
    pub fn message(&self) -> String {
        if self.path.is_empty() {
            self.problem.clone()
        } else {
            let path: Vec<&str> = self.path.iter().rev().map(String::as_str).collect();
            format!("{}: {}", path.join("."), self.problem)
        }
    }
}

impl fmt::Display for NotJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for NotJson {}

impl serde::de::Error for NotJson {
    fn custom<T: fmt::Display>(message: T) -> NotJson {
        NotJson::new(message.to_string())
    }
}

/// How deep a Python value may nest: the engine's own limit on open values
/// ([`MAX_NESTING`], checked when a context is read) plus the levels of a context around them
/// (`messages.0.content`), so the engine's check is the one that decides.
pub const MAX_DEPTH: usize = MAX_NESTING + 4;

/// A Python value as JSON: `dict` (string keys), `list`, `tuple`, `str`, `int`, `float`
/// (finite), `bool` and `None`, nested at most [`MAX_DEPTH`] levels.
pub fn to_json(value: &Bound<'_, PyAny>) -> Result<Value, NotJson> {
    Value::deserialize(PythonValue::new(value))
}

/// A Python value read as JSON by whatever deserializes it: a context's struct is filled
/// straight from the dicts, lists and strings, with no JSON value built in between. An error
/// says where it happened (the keys and indexes down to it).
struct PythonValue<'a, 'py> {
    value: &'a Bound<'py, PyAny>,
    /// How many dicts and lists enclose the value.
    depth: usize,
}

impl<'a, 'py> PythonValue<'a, 'py> {
    fn new(value: &'a Bound<'py, PyAny>) -> Self {
        PythonValue { value, depth: 0 }
    }

    /// A value one level inside this one.
    fn inner<'b>(&self, value: &'b Bound<'py, PyAny>) -> PythonValue<'b, 'py> {
        PythonValue {
            value,
            depth: self.depth + 1,
        }
    }

    /// Fails when a dict or a list here would nest deeper than [`MAX_DEPTH`].
    fn check_depth(&self) -> Result<(), NotJson> {
        if self.depth >= MAX_DEPTH {
            return Err(NotJson::new(format!(
                "nested deeper than {MAX_DEPTH} levels (or a structure that contains itself)"
            )));
        }
        Ok(())
    }

    /// The items of `dict` (this value), to read as a map.
    fn dict_items(&self, dict: &Bound<'py, PyDict>) -> Result<DictItems<'_, 'a, 'py>, NotJson> {
        self.check_depth()?;
        Ok(DictItems {
            outer: self,
            items: dict.iter(),
            next: None,
        })
    }

    /// The items of this list or tuple, to read as a sequence.
    fn items<I>(&self, items: I) -> Result<Items<'_, 'a, 'py, I>, NotJson> {
        self.check_depth()?;
        Ok(Items {
            outer: self,
            items,
            index: 0,
        })
    }
}

/// The text of a Python string: borrowed from the string on CPython 3.10 and later, a copy
/// before.
fn text<'a>(string: &'a Bound<'_, PyString>) -> Result<Cow<'a, str>, NotJson> {
    let invalid = || NotJson::new("a string that is not valid Unicode");
    if !utf8::kept_by_strings(string.py()) {
        return string.to_cow().map_err(|_| invalid());
    }
    utf8::borrow(string).map(Cow::Borrowed).ok_or_else(invalid)
}

/// A string's UTF-8 form as the string itself keeps it, without the copy (a `bytes` object,
/// then a Rust string) that the stable ABI of CPython 3.9 implies: each context carries a
/// dozen strings, and the copies were the largest part of reading one.
mod utf8 {
    use std::ffi::c_char;
    use std::sync::OnceLock;

    use pyo3::ffi::{Py_ssize_t, PyObject};
    use pyo3::prelude::*;
    use pyo3::types::PyString;

    unsafe extern "C" {
        /// Part of CPython's stable ABI since 3.10 (and of its API long before): the string's
        /// UTF-8 form, kept in the string object for as long as it lives, or NULL with an
        /// exception set (a lone surrogate).
        fn PyUnicode_AsUTF8AndSize(unicode: *mut PyObject, size: *mut Py_ssize_t) -> *const c_char;
    }

    /// Whether this interpreter is CPython 3.10 or later, where [`borrow`] may be called.
    pub(super) fn kept_by_strings(py: Python<'_>) -> bool {
        static SINCE_3_10: OnceLock<bool> = OnceLock::new();
        *SINCE_3_10.get_or_init(|| py.version_info() >= (3, 10))
    }

    /// The string's text, borrowed from it; `None` when it is not valid Unicode. Only when
    /// [`kept_by_strings`].
    pub(super) fn borrow<'a>(string: &'a Bound<'_, PyString>) -> Option<&'a str> {
        let mut size: Py_ssize_t = 0;
        // SAFETY: `string` is a live `str` object and the GIL is held (a `Bound` proves
        // both); on CPython 3.10 and later (the caller checked) the function is part of the
        // stable ABI, and `size` is a valid place for the length.
        let data = unsafe { PyUnicode_AsUTF8AndSize(string.as_ptr(), &mut size) };
        if data.is_null() {
            // The `UnicodeEncodeError` it raised is replaced by the caller's own error.
            drop(PyErr::take(string.py()));
            return None;
        }
        let size = usize::try_from(size).ok()?;
        // SAFETY: CPython returned `size` bytes at `data`, which the string object keeps
        // unchanged until it is freed; the borrow of `string` (`'a`) keeps it alive. They are
        // UTF-8: CPython encodes strictly (a lone surrogate is the error above).
        unsafe {
            let bytes = std::slice::from_raw_parts(data.cast::<u8>(), size);
            Some(std::str::from_utf8_unchecked(bytes))
        }
    }
}

impl<'de> Deserializer<'de> for PythonValue<'_, '_> {
    type Error = NotJson;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, NotJson> {
        let value = self.value;
        if let Ok(string) = value.cast::<PyString>() {
            return visitor.visit_str(&text(string)?);
        }
        if value.is_none() {
            return visitor.visit_unit();
        }
        // `bool` before `int`: `True` is an `int` too.
        if let Ok(flag) = value.cast::<PyBool>() {
            return visitor.visit_bool(flag.is_true());
        }
        if value.is_instance_of::<PyInt>() {
            if let Ok(number) = value.extract::<i64>() {
                return visitor.visit_i64(number);
            }
            if let Ok(number) = value.extract::<u64>() {
                return visitor.visit_u64(number);
            }
            return Err(NotJson::new(
                "an integer too large for JSON (beyond 64 bits)",
            ));
        }
        if let Ok(number) = value.cast::<PyFloat>() {
            let number = number.value();
            if !number.is_finite() {
                return Err(NotJson::new("a float that is not finite (NaN or infinity)"));
            }
            return visitor.visit_f64(number);
        }
        if let Ok(dict) = value.cast::<PyDict>() {
            return visitor.visit_map(self.dict_items(dict)?);
        }
        if let Ok(list) = value.cast::<PyList>() {
            return visitor.visit_seq(self.items(list.iter())?);
        }
        if let Ok(tuple) = value.cast::<PyTuple>() {
            return visitor.visit_seq(self.items(tuple.iter())?);
        }
        Err(NotJson::new(format!("a {} is not JSON", type_name(value))))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, NotJson> {
        if self.value.is_none() {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, NotJson> {
        visitor.visit_newtype_struct(self)
    }

    /// An enum as JSON writes one: a string for a unit variant (`"assistant"`), a dict of one
    /// key for the others.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, NotJson> {
        if let Ok(string) = self.value.cast::<PyString>() {
            let name = text(string)?;
            let variant: StrDeserializer<'_, NotJson> = name.as_ref().into_deserializer();
            return visitor.visit_enum(variant);
        }
        if let Ok(dict) = self.value.cast::<PyDict>() {
            return visitor.visit_enum(MapAccessDeserializer::new(self.dict_items(dict)?));
        }
        self.deserialize_any(visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

/// The items of a dict, read as a map; an error inside a value is placed under its key.
struct DictItems<'a, 'b, 'py> {
    outer: &'a PythonValue<'b, 'py>,
    items: BoundDictIterator<'py>,
    /// The value of the key just read, with the key.
    next: Option<(Bound<'py, PyString>, Bound<'py, PyAny>)>,
}

impl<'de> MapAccess<'de> for DictItems<'_, '_, '_> {
    type Error = NotJson;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, NotJson> {
        let Some((key, value)) = self.items.next() else {
            return Ok(None);
        };
        let key = key.cast_into::<PyString>().map_err(|error| {
            NotJson::new(format!(
                "a key of type {} (JSON keys are strings)",
                type_name(error.into_inner().as_any())
            ))
        })?;
        let name = text(&key).map_err(|_| NotJson::new("a key that is not valid Unicode"))?;
        let read: StrDeserializer<'_, NotJson> = name.as_ref().into_deserializer();
        let read = seed.deserialize(read)?;
        self.next = Some((key, value));
        Ok(Some(read))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, NotJson> {
        let Some((key, value)) = self.next.take() else {
            return Err(NotJson::new("a dict value read before its key"));
        };
        seed.deserialize(self.outer.inner(&value))
            .map_err(|error| error.at(text(&key).map_or_else(|_| "?".to_owned(), Cow::into_owned)))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The items of a list or a tuple, read as a sequence; an error inside one is placed under its
/// index.
struct Items<'a, 'b, 'py, I> {
    outer: &'a PythonValue<'b, 'py>,
    items: I,
    index: usize,
}

impl<'de, 'py, I> SeqAccess<'de> for Items<'_, '_, 'py, I>
where
    I: ExactSizeIterator<Item = Bound<'py, PyAny>>,
{
    type Error = NotJson;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, NotJson> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let index = self.index;
        self.index += 1;
        seed.deserialize(self.outer.inner(&item))
            .map(Some)
            .map_err(|error| error.at(index.to_string()))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

/// The name of a value's type (`set`, `MyClass`).
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "value".to_owned(), |name| name.to_string())
}

/// JSON text as the Python value it writes, read by Python's own `json.loads` (the records of
/// a call come as text: no JSON value is built on the way).
pub(crate) fn from_json_text<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    static LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let loads = LOADS.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py
            .import(intern!(py, "json"))?
            .getattr(intern!(py, "loads"))?
            .unbind())
    })?;
    loads.bind(py).call1((text,))
}

/// JSON as the Python value of the same shape (`dict`, `list`, `str`, `int`, `float`, `bool`,
/// `None`).
pub fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(flag) => PyBool::new(py, *flag).to_owned().into_any(),
        Value::Number(number) => {
            if let Some(number) = number.as_i64() {
                number.into_pyobject(py)?.into_any()
            } else if let Some(number) = number.as_u64() {
                number.into_pyobject(py)?.into_any()
            } else {
                number
                    .as_f64()
                    .unwrap_or(f64::NAN)
                    .into_pyobject(py)?
                    .into_any()
            }
        }
        Value::String(text) => PyString::new(py, text).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(object) => {
            let dict = PyDict::new(py);
            for (key, item) in object {
                dict.set_item(key, to_python(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// Reads a context of `C`'s point from a Python value: a `TypeError` when it is not a dict, a
/// `ValueError` saying what is wrong when it is not a valid context.
pub fn read_context<C: PolicyContext>(value: &Bound<'_, PyAny>) -> PyResult<C> {
    if !value.is_instance_of::<PyDict>() {
        return Err(PyTypeError::new_err(format!(
            "the {} context must be a dict, not {}",
            C::POINT,
            type_name(value)
        )));
    }
    C::deserialize(PythonValue::new(value)).map_err(|error| {
        PyValueError::new_err(format!(
            "not a valid {} context: {}",
            C::POINT,
            error.message()
        ))
    })
}
