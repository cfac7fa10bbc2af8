//! Checking a module without compiling it: what `portcullis check` needs, in milliseconds
//! instead of the second a native compile of an OPA module takes.
//!
//! The module is validated ([`wasmparser::Validator`]), given its time limit as it would be
//! for evaluation (a module that cannot take one is refused here as there), its imports
//! checked against the OPA ABI, and its ABI version read from its exported globals. The
//! entrypoints and builtins are what the module's `entrypoints()` and `builtins()` functions
//! return: OPA's compiler writes each as a list of `opa_object_insert(obj,
//! opa_string_terminated(<address>), opa_number_int(<id>))`, so they are read from the
//! function bodies and the data segments. A module whose functions have another shape is
//! not understood statically: [`read`] says so, and the caller compiles it instead.

use std::collections::HashMap;

use wasmparser::{
    ConstExpr, DataKind, ExternalKind, Operator, Parser, Payload, TypeRef, ValType, Validator,
    WasmFeatures,
};

use crate::meter;
use crate::runtime::ModuleError;

/// What a module says about itself, read without compiling it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StaticInfo {
    /// The ABI version, `(major, minor)`.
    pub(crate) abi: (i32, i32),
    /// Entrypoint names, sorted.
    pub(crate) entrypoints: Vec<String>,
    /// The builtins the module calls on the host, by Rego name, sorted.
    pub(crate) builtins: Vec<String>,
}

/// The exports every OPA module has (those the host calls).
const REQUIRED_EXPORTS: &[&str] = &[
    "opa_malloc",
    "opa_json_parse",
    "opa_json_dump",
    "opa_heap_ptr_get",
    "opa_heap_ptr_set",
    "opa_eval_ctx_new",
    "opa_eval_ctx_set_input",
    "opa_eval_ctx_set_data",
    "opa_eval_ctx_get_result",
    "eval",
    "builtins",
];

/// Checks `wasm` as opening it for evaluation would, without compiling it: `Ok(None)` when
/// the module is valid but its `entrypoints()`/`builtins()` cannot be read statically (then
/// only a compile can tell).
pub(crate) fn read(wasm: &[u8]) -> Result<Option<StaticInfo>, ModuleError> {
    let mut validator = Validator::new_with_features(WasmFeatures::default());
    validator
        .validate_all(wasm)
        .map_err(|error| ModuleError::Compile(error.to_string()))?;
    if let Err(refused) = meter::rewrite(wasm) {
        return Err(ModuleError::NotOpa(format!(
            "cannot give the module a time limit: {refused}"
        )));
    }
    let module = Parts::read(wasm).map_err(|error| ModuleError::Compile(error.to_string()))?;
    module.check_imports().map_err(ModuleError::NotOpa)?;
    for name in REQUIRED_EXPORTS {
        if !module.exports.contains_key(*name) {
            return Err(ModuleError::NotOpa(format!("export {name}: not found")));
        }
    }
    let abi = (
        module.global_export("opa_wasm_abi_version").unwrap_or(1),
        module
            .global_export("opa_wasm_abi_minor_version")
            .unwrap_or(0),
    );
    if abi.0 != 1 {
        return Err(ModuleError::NotOpa(format!(
            "unsupported ABI version {}.{} (supported: 1.x)",
            abi.0, abi.1
        )));
    }
    let Some(builtins) = module.names_of("builtins") else {
        return Ok(None);
    };
    let entrypoints = if module.exports.contains_key("entrypoints") {
        match module.names_of("entrypoints") {
            Some(entrypoints) => entrypoints,
            None => return Ok(None),
        }
    } else {
        Vec::new()
    };
    let missing: Vec<String> = builtins
        .iter()
        .filter(|name| crate::builtins::lookup(name).is_none())
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(ModuleError::MissingBuiltins(missing));
    }
    Ok(Some(StaticInfo {
        abi,
        entrypoints,
        builtins,
    }))
}

/// The parts of a module the checks read.
#[derive(Default)]
struct Parts<'a> {
    /// `(module, name, type)` of each import.
    imports: Vec<(&'a str, &'a str, Import)>,
    /// Exports by name: kind and index.
    exports: HashMap<&'a str, (ExternalKind, u32)>,
    /// The value of each global defined by the module whose initial value is an `i32.const`.
    globals: Vec<Option<i32>>,
    imported_globals: u32,
    imported_functions: u32,
    /// The bodies of defined functions, in order.
    bodies: Vec<wasmparser::FunctionBody<'a>>,
    /// Active data segments at a constant offset of memory 0: `(offset, bytes)`.
    data: Vec<(u32, &'a [u8])>,
    /// Function types: `(parameter count, result count, all i32)`.
    types: Vec<(usize, usize, bool)>,
}

/// An import's type, as far as the checks care.
enum Import {
    Function(u32),
    Memory { memory64: bool, shared: bool },
    Global,
    Other,
}

impl<'a> Parts<'a> {
    fn read(wasm: &'a [u8]) -> wasmparser::Result<Self> {
        let mut parts = Parts::default();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::TypeSection(section) => {
                    for ty in section.into_iter_err_on_gc_types() {
                        let ty = ty?;
                        let all_i32 = ty
                            .params()
                            .iter()
                            .chain(ty.results())
                            .all(|t| *t == ValType::I32);
                        parts
                            .types
                            .push((ty.params().len(), ty.results().len(), all_i32));
                    }
                }
                Payload::ImportSection(section) => {
                    for import in section.into_imports() {
                        let import = import?;
                        let ty = match import.ty {
                            TypeRef::Func(index) | TypeRef::FuncExact(index) => {
                                parts.imported_functions += 1;
                                Import::Function(index)
                            }
                            TypeRef::Memory(memory) => Import::Memory {
                                memory64: memory.memory64,
                                shared: memory.shared,
                            },
                            TypeRef::Global(_) => {
                                parts.imported_globals += 1;
                                Import::Global
                            }
                            _ => Import::Other,
                        };
                        parts.imports.push((import.module, import.name, ty));
                    }
                }
                Payload::GlobalSection(section) => {
                    for global in section {
                        parts.globals.push(const_i32(&global?.init_expr));
                    }
                }
                Payload::ExportSection(section) => {
                    for export in section {
                        let export = export?;
                        parts
                            .exports
                            .insert(export.name, (export.kind, export.index));
                    }
                }
                Payload::DataSection(section) => {
                    for data in section {
                        let data = data?;
                        if let DataKind::Active {
                            memory_index: 0,
                            offset_expr,
                        } = data.kind
                            && let Some(offset) = const_i32(&offset_expr)
                        {
                            parts.data.push((offset.cast_unsigned(), data.data));
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => parts.bodies.push(body),
                _ => {}
            }
        }
        Ok(parts)
    }

    /// The OPA ABI's imports, with their types (as the compiled path checks them).
    fn check_imports(&self) -> Result<(), String> {
        let mut has_memory = false;
        for (module, name, ty) in &self.imports {
            let wrong = || format!("unexpected import {module}.{name}");
            if *module == meter::IMPORT_MODULE {
                // The rewrite adds these names; a module importing them itself is refused by it.
                return Err(wrong());
            }
            if *module != "env" {
                return Err(wrong());
            }
            let expect_func = |params: usize, results: usize| -> Result<(), String> {
                match ty {
                    Import::Function(index)
                        if self
                            .types
                            .get(*index as usize)
                            .is_some_and(|t| *t == (params, results, true)) =>
                    {
                        Ok(())
                    }
                    _ => Err(format!(
                        "import env.{name} has the wrong type (expected {params} i32 parameter(s) and {results} i32 result(s))"
                    )),
                }
            };
            match *name {
                "memory" => match ty {
                    Import::Memory {
                        memory64: false,
                        shared: false,
                    } => has_memory = true,
                    _ => return Err("import env.memory is not a 32-bit unshared memory".to_owned()),
                },
                "opa_abort" | "opa_println" => expect_func(1, 0)?,
                _ => match name
                    .strip_prefix("opa_builtin")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    Some(arity) if arity <= 4 => expect_func(arity + 2, 1)?,
                    _ => return Err(wrong()),
                },
            }
        }
        if !has_memory {
            return Err("the module does not import env.memory".to_owned());
        }
        Ok(())
    }

    /// The constant value of an exported global defined by the module.
    fn global_export(&self, name: &str) -> Option<i32> {
        let (kind, index) = self.exports.get(name)?;
        if *kind != ExternalKind::Global {
            return None;
        }
        let defined = index.checked_sub(self.imported_globals)?;
        self.globals.get(defined as usize).copied().flatten()
    }

    /// The names the exported function `export` puts into the object it returns, sorted;
    /// `None` when its body is not the shape OPA's compiler writes.
    fn names_of(&self, export: &str) -> Option<Vec<String>> {
        let (kind, index) = self.exports.get(export)?;
        if *kind != ExternalKind::Func {
            return None;
        }
        let defined = index.checked_sub(self.imported_functions)?;
        let body = self.bodies.get(defined as usize)?;
        let mut reader = body.get_operators_reader().ok()?;
        // The body: an object, then per entry a string from an address and a number from a
        // constant, inserted; everything between those is moving the object through a local.
        let mut names = Vec::new();
        let mut string: Option<String> = None;
        let mut number = false;
        let mut pending_address: Option<u32> = None;
        let mut pending_number = false;
        while !reader.eof() {
            match reader.read().ok()? {
                Operator::I32Const { value } => pending_address = Some(value.cast_unsigned()),
                Operator::I64Const { .. } => pending_number = true,
                Operator::Call { .. } => {
                    if let Some(address) = pending_address.take() {
                        string = Some(self.c_string(address)?);
                    } else if pending_number {
                        pending_number = false;
                        number = true;
                    } else if let (Some(name), true) = (string.take(), number) {
                        // The insert.
                        names.push(name);
                        number = false;
                    }
                    // Otherwise: the call making the object.
                }
                Operator::LocalGet { .. }
                | Operator::LocalSet { .. }
                | Operator::LocalTee { .. }
                | Operator::Drop
                | Operator::Return
                | Operator::End => {}
                _ => return None,
            }
        }
        if string.is_some() || number || pending_address.is_some() || pending_number {
            return None;
        }
        names.sort();
        names.dedup();
        Some(names)
    }

    /// The NUL-terminated UTF-8 string at `address` in the module's data.
    fn c_string(&self, address: u32) -> Option<String> {
        let (offset, bytes) = self.data.iter().find(|(offset, bytes)| {
            address >= *offset && ((address - offset) as usize) < bytes.len()
        })?;
        let start = (address - offset) as usize;
        let text = &bytes[start..];
        let end = text.iter().position(|b| *b == 0)?;
        String::from_utf8(text[..end].to_vec()).ok()
    }
}

fn const_i32(expression: &ConstExpr<'_>) -> Option<i32> {
    let mut reader = expression.get_operators_reader();
    let value = match reader.read().ok()? {
        Operator::I32Const { value } => value,
        _ => return None,
    };
    matches!(reader.read().ok()?, Operator::End).then_some(value)
}
