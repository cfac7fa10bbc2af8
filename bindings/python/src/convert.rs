//! Python values as JSON and back: contexts and decisions cross the boundary as the plain
//! dicts, lists, strings, numbers, booleans and `None` of §1 and §2.
//!
//! Reading a Python value is bounded by [`MAX_DEPTH`]: a structure nested deeper (or one that
//! contains itself) is refused with the path where it went too deep, never a stack overflow.

use portcullis_engine::{MAX_NESTING, PolicyContext};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

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

/// How deep a Python value may nest: the engine's own limit on open values
/// ([`MAX_NESTING`], checked when a context is read) plus the levels of a context around them
/// (`messages.0.content`), so the engine's check is the one that decides.
pub const MAX_DEPTH: usize = MAX_NESTING + 4;

/// A Python value as JSON: `dict` (string keys), `list`, `tuple`, `str`, `int`, `float`
/// (finite), `bool` and `None`, nested at most [`MAX_DEPTH`] levels.
pub fn to_json(value: &Bound<'_, PyAny>) -> Result<Value, NotJson> {
    read(value, 0)
}

fn read(value: &Bound<'_, PyAny>, depth: usize) -> Result<Value, NotJson> {
    if let Ok(text) = value.cast::<PyString>() {
        return text
            .to_cow()
            .map(|text| Value::String(text.into_owned()))
            .map_err(|_| NotJson::new("a string that is not valid Unicode"));
    }
    if value.is_none() {
        return Ok(Value::Null);
    }
    // `bool` before `int`: `True` is an `int` too.
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(number) = value.extract::<i64>() {
            return Ok(Value::from(number));
        }
        if let Ok(number) = value.extract::<u64>() {
            return Ok(Value::from(number));
        }
        return Err(NotJson::new(
            "an integer too large for JSON (beyond 64 bits)",
        ));
    }
    if let Ok(number) = value.cast::<PyFloat>() {
        return Number::from_f64(number.value())
            .map(Value::Number)
            .ok_or_else(|| NotJson::new("a float that is not finite (NaN or infinity)"));
    }
    if depth >= MAX_DEPTH {
        return Err(NotJson::new(format!(
            "nested deeper than {MAX_DEPTH} levels (or a structure that contains itself)"
        )));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut object = Map::new();
        for (key, item) in dict.iter() {
            let Ok(key) = key.cast::<PyString>() else {
                return Err(NotJson::new(format!(
                    "a key of type {} (JSON keys are strings)",
                    type_name(&key)
                )));
            };
            let key = key
                .to_cow()
                .map_err(|_| NotJson::new("a key that is not valid Unicode"))?
                .into_owned();
            let item = read(&item, depth + 1).map_err(|error| error.at(key.as_str()))?;
            object.insert(key, item);
        }
        return Ok(Value::Object(object));
    }
    if let Ok(list) = value.cast::<PyList>() {
        return read_items(list.iter(), depth);
    }
    if let Ok(tuple) = value.cast::<PyTuple>() {
        return read_items(tuple.iter(), depth);
    }
    Err(NotJson::new(format!("a {} is not JSON", type_name(value))))
}

fn read_items<'py>(
    items: impl Iterator<Item = Bound<'py, PyAny>>,
    depth: usize,
) -> Result<Value, NotJson> {
    items
        .enumerate()
        .map(|(index, item)| read(&item, depth + 1).map_err(|error| error.at(index.to_string())))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// The name of a value's type (`set`, `MyClass`).
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "value".to_owned(), |name| name.to_string())
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
    let json = to_json(value).map_err(|error| {
        PyValueError::new_err(format!(
            "not a valid {} context: {}",
            C::POINT,
            error.message()
        ))
    })?;
    C::deserialize(json).map_err(|error| {
        PyValueError::new_err(format!("not a valid {} context: {error}", C::POINT))
    })
}
