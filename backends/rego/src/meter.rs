//! The time limit, built into the module: a check of the clock at every place a run can repeat.
//!
//! A module's code can only run for long by repeating itself, and it can only repeat through a
//! loop or through a function that calls itself (directly, through other functions or through
//! the table). Before compiling, the module is rewritten so that the start of every loop
//! iteration and the entry of every such recursive function compare the process-wide clock with
//! the evaluation's deadline, and trap once the deadline has passed:
//!
//! ```wat
//! (if (i64.ge_u (i64.load $clock (i32.const 0)) (global.get $deadline)) (then unreachable))
//! ```
//!
//! The clock is a count of milliseconds in a one-page shared memory, advanced by a thread of
//! the host; the deadline is a global the host sets before every evaluation. Both are imports
//! added by the rewrite (`portcullis.clock` and `portcullis.deadline`), so the module's own
//! memories and globals keep their contents, and only their indices above the module's imports
//! move up by one.
//!
//! The check is a few loads, a compare and a branch not taken before the deadline. wasmtime's
//! epoch interruption does much the same, but at the entry of every function as well, and its
//! late path calls into the host: a call inside a loop makes the register allocator keep the
//! loop's values where a call cannot clobber them. OPA's runtime is made of many small functions
//! and loops, and that was about a fifth of an evaluation's time.
//!
//! Which functions are recursive comes from the module's call graph: an edge for every direct
//! call, and from every function with an indirect call to every function the table can hold
//! (every function an element segment or a `ref.func` names). A function on a cycle of that
//! graph is recursive.
//!
//! A module that waits on a shared memory (`memory.atomic.wait32/64`) or defines one is refused:
//! a wait is not a loop, and could outlast any deadline.
//!
//! The same pass adds the evaluation entry of [`crate::entry`] (a function of its own, with no
//! loop), when the module has the exports it calls, and the host's turn at `regex.match` (see
//! [`RegexPlan`]).

use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{
    BlockType, EntityType, GlobalType, Instruction, MemArg, MemoryType, Module, SectionId, ValType,
};
use wasmparser::{
    CompositeInnerType, ElementItems, ExternalKind, Operator, Parser, Payload, TypeRef,
};

use crate::entry::{self, Entry};

/// The module name of the imports the rewrite adds.
pub(crate) const IMPORT_MODULE: &str = "portcullis";
/// The clock: a shared memory of one page, the current tick as a little-endian `i64` at 0.
pub(crate) const CLOCK: &str = "clock";
/// The deadline: a mutable `i64` global, the first tick at which the evaluation must stop.
pub(crate) const DEADLINE: &str = "deadline";

/// `wasm` with the clock checks added, or `None` when it defines no function (nothing can run,
/// so nothing is added).
///
/// # Errors
/// The module is not valid WebAssembly (as far as this pass reads it), imports from
/// [`IMPORT_MODULE`] itself, or waits on or defines a shared memory.
#[cfg(test)]
pub(crate) fn instrument(wasm: &[u8]) -> Result<Option<Vec<u8>>, String> {
    Ok(rewrite(wasm)?.map(|rewritten| rewritten.wasm))
}

/// A rewritten module.
pub(crate) struct Rewritten {
    pub(crate) wasm: Vec<u8>,
    /// Whether the evaluation entry ([`crate::entry`]) was added.
    pub(crate) entry: bool,
    /// Whether calls of `opa_regex_match` go through the host first ([`RegexPlan`]).
    pub(crate) regex: bool,
}

/// The export of the function that calls of `opa_regex_match` are redirected to.
pub(crate) const REGEX_EXPORT: &str = "portcullis_regex_match";

/// The builtin id by which the redirected `regex.match` asks the host, through the module's own
/// `env.opa_builtin2` import (OPA's builtin ids are the indices of the module's `builtins()` map,
/// never negative).
pub(crate) const REGEX_BUILTIN_ID: i32 = i32::MIN;

/// The host's answer meaning "not decided here": the module's own function decides.
pub(crate) const REGEX_UNDECIDED: i32 = 2;

/// The host's turn at `regex.match`.
///
/// OPA's runtime matches with RE2 compiled to WebAssembly, and copies the pattern and the text
/// into C++ strings, looks the pattern up in a hash map and inserts it again at every call: for
/// a short text that is several times the cost of the match. When the module names its
/// functions (OPA's builds do) and has `opa_regex_match(pattern, value)`, `opa_boolean(b)` and
/// the import `env.opa_builtin2`, every direct call of `opa_regex_match` is redirected to an
/// added function:
///
/// ```wat
/// (func (param $pattern i32) (param $value i32) (result i32) (local $answer i32)
///   (local.tee $answer (call $opa_builtin2 (i32.const REGEX_BUILTIN_ID) (i32.const 0)
///     (local.get $pattern) (local.get $value)))
///   (if (result i32) (i32.ge_u (i32.const REGEX_UNDECIDED))
///     (then (call $opa_regex_match (local.get $pattern) (local.get $value)))
///     (else (call $opa_boolean (local.get $answer)))))
/// ```
///
/// The host answers 0 or 1 only for what it matches exactly as RE2 does (see
/// `runtime::regex`), and [`REGEX_UNDECIDED`] for anything else, which the module's own code
/// then decides as before.
#[derive(Clone, Copy)]
struct RegexPlan {
    original: u32,
    boolean: u32,
    builtin2: u32,
    type_index: u32,
    function_index: u32,
}

impl RegexPlan {
    fn body(&self) -> wasm_encoder::Function {
        const PATTERN: u32 = 0;
        const VALUE: u32 = 1;
        const ANSWER: u32 = 2;
        let mut f = wasm_encoder::Function::new([(1, ValType::I32)]);
        f.instruction(&Instruction::I32Const(REGEX_BUILTIN_ID))
            .instruction(&Instruction::I32Const(0))
            .instruction(&Instruction::LocalGet(PATTERN))
            .instruction(&Instruction::LocalGet(VALUE))
            .instruction(&Instruction::Call(self.builtin2))
            .instruction(&Instruction::LocalTee(ANSWER))
            .instruction(&Instruction::I32Const(REGEX_UNDECIDED))
            .instruction(&Instruction::I32GeU)
            .instruction(&Instruction::If(BlockType::Result(ValType::I32)))
            .instruction(&Instruction::LocalGet(PATTERN))
            .instruction(&Instruction::LocalGet(VALUE))
            .instruction(&Instruction::Call(self.original))
            .instruction(&Instruction::Else)
            .instruction(&Instruction::LocalGet(ANSWER))
            .instruction(&Instruction::Call(self.boolean))
            .instruction(&Instruction::End)
            .instruction(&Instruction::End);
        f
    }
}

/// [`instrument`], saying whether the evaluation entry was added too.
///
/// # Errors
/// As [`instrument`].
pub(crate) fn rewrite(wasm: &[u8]) -> Result<Option<Rewritten>, String> {
    let shape = Shape::read(wasm).map_err(|error| error.to_string())?;
    if let Some(refused) = shape.refused {
        return Err(refused);
    }
    if shape.bodies.is_empty() {
        return Ok(None);
    }
    let signatures: Vec<Option<entry::Signature>> = shape
        .function_types
        .iter()
        .map(|&ty| shape.types.get(ty as usize).copied().flatten())
        .collect();
    let functions =
        u32::try_from(shape.function_types.len()).map_err(|_| "too many functions".to_owned())?;
    let entry = entry::plan(
        &signatures,
        &shape.exports,
        u32::try_from(shape.types.len()).map_err(|_| "too many types".to_owned())?,
        functions,
        shape.imported_memories == 1 && shape.defined_memories == 0,
    );
    let regex = shape.regex_plan(&signatures, functions + u32::from(entry.is_some()));
    let mut meter = Meter {
        imported_memories: shape.imported_memories,
        imported_globals: shape.imported_globals,
        recursive: shape.recursive(),
        next_body: 0,
        imports_added: false,
        entry,
        regex,
    };
    let entry = meter.entry.is_some();
    let mut module = Module::new();
    meter
        .parse_core_module(&mut module, Parser::new(0), wasm)
        .map_err(|error| error.to_string())?;
    Ok(Some(Rewritten {
        wasm: module.finish(),
        entry,
        regex: regex.is_some(),
    }))
}

/// What the rewrite needs to know about the module, from a first pass over it.
#[derive(Default)]
struct Shape {
    imported_functions: u32,
    imported_memories: u32,
    imported_globals: u32,
    /// Per defined function: what it calls.
    bodies: Vec<Calls>,
    /// Functions the table can hold (by function index, imported ones included).
    address_taken: Vec<u32>,
    /// Why the module cannot be given a time limit, if it cannot.
    refused: Option<String>,
    /// Per type index: its signature when it is a function of `i32`s only.
    types: Vec<Option<entry::Signature>>,
    /// Per function (imported ones first): its type index.
    function_types: Vec<u32>,
    /// Exported functions by name.
    exports: std::collections::HashMap<String, u32>,
    defined_memories: u32,
    /// The function index of the import `env.opa_builtin2`.
    builtin2: Option<u32>,
    /// The function indices of `opa_regex_match` and `opa_boolean` (from the name section).
    regex_match: Option<u32>,
    boolean: Option<u32>,
}

/// The calls one function body makes.
#[derive(Default)]
struct Calls {
    /// The functions it calls directly.
    direct: Vec<u32>,
    /// Whether it makes indirect calls.
    indirect: bool,
}

impl Shape {
    /// Reads `wasm` once, noting what the rewrite needs and what it must refuse.
    fn read(wasm: &[u8]) -> wasmparser::Result<Self> {
        let mut shape = Shape::default();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload? {
                Payload::ImportSection(section) => {
                    for import in section.into_imports() {
                        let import = import?;
                        if import.module == IMPORT_MODULE {
                            shape.refused = Some(format!(
                                "the module imports {IMPORT_MODULE}.{}: that module name is kept for the host",
                                import.name
                            ));
                        }
                        match import.ty {
                            TypeRef::Func(ty) | TypeRef::FuncExact(ty) => {
                                if import.module == "env" && import.name == "opa_builtin2" {
                                    shape.builtin2 = Some(shape.imported_functions);
                                }
                                shape.imported_functions += 1;
                                shape.function_types.push(ty);
                            }
                            TypeRef::Memory(_) => shape.imported_memories += 1,
                            TypeRef::Global(_) => shape.imported_globals += 1,
                            _ => {}
                        }
                    }
                }
                Payload::TypeSection(section) => {
                    for group in section {
                        for sub in group?.into_types() {
                            let signature = match &sub.composite_type.inner {
                                CompositeInnerType::Func(func) => func
                                    .params()
                                    .iter()
                                    .chain(func.results())
                                    .all(|ty| *ty == wasmparser::ValType::I32)
                                    .then(|| (func.params().len(), func.results().len())),
                                _ => None,
                            };
                            shape.types.push(signature);
                        }
                    }
                }
                Payload::FunctionSection(section) => {
                    for ty in section {
                        shape.function_types.push(ty?);
                    }
                }
                Payload::ExportSection(section) => {
                    for export in section {
                        let export = export?;
                        // Other kinds keep their name taken, with no function behind it.
                        let index = if export.kind == ExternalKind::Func {
                            export.index
                        } else {
                            u32::MAX
                        };
                        shape.exports.insert(export.name.to_owned(), index);
                    }
                }
                Payload::MemorySection(section) => {
                    for memory in section {
                        shape.defined_memories += 1;
                        if memory?.shared {
                            shape.refused = Some("the module defines a shared memory".to_owned());
                        }
                    }
                }
                Payload::GlobalSection(section) => {
                    for global in section {
                        shape.note_references(&global?.init_expr)?;
                    }
                }
                Payload::ElementSection(section) => {
                    for element in section {
                        match element?.items {
                            ElementItems::Functions(functions) => {
                                for function in functions {
                                    shape.address_taken.push(function?);
                                }
                            }
                            ElementItems::Expressions(_, expressions) => {
                                for expression in expressions {
                                    shape.note_references(&expression?)?;
                                }
                            }
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let mut calls = Calls::default();
                    for operator in body.get_operators_reader()? {
                        match operator? {
                            Operator::Call { function_index }
                            | Operator::ReturnCall { function_index } => {
                                calls.direct.push(function_index);
                            }
                            Operator::CallIndirect { .. }
                            | Operator::ReturnCallIndirect { .. }
                            | Operator::CallRef { .. }
                            | Operator::ReturnCallRef { .. } => calls.indirect = true,
                            Operator::RefFunc { function_index } => {
                                shape.address_taken.push(function_index);
                            }
                            Operator::MemoryAtomicWait32 { .. }
                            | Operator::MemoryAtomicWait64 { .. } => {
                                shape.refused =
                                    Some("the module waits on a shared memory".to_owned());
                            }
                            _ => {}
                        }
                    }
                    shape.bodies.push(calls);
                }
                Payload::CustomSection(section) => {
                    if let wasmparser::KnownCustom::Name(names) = section.as_known() {
                        // Names are a hint for the host's turn at `regex.match` only: a name
                        // section that does not read gives no turn, and is kept as it is.
                        shape.read_names(names);
                    }
                }
                _ => {}
            }
        }
        Ok(shape)
    }

    /// Notes the indices of the functions named `opa_regex_match` and `opa_boolean`.
    fn read_names(&mut self, names: wasmparser::NameSectionReader<'_>) {
        for name in names {
            let Ok(wasmparser::Name::Function(map)) = name else {
                continue;
            };
            for naming in map {
                let Ok(naming) = naming else {
                    break;
                };
                match naming.name {
                    "opa_regex_match" => self.regex_match = Some(naming.index),
                    "opa_boolean" => self.boolean = Some(naming.index),
                    _ => {}
                }
            }
        }
    }

    /// The host's turn at `regex.match` ([`RegexPlan`]), added as function `function_index`,
    /// when the module has what it needs with the expected signatures.
    fn regex_plan(
        &self,
        signatures: &[Option<entry::Signature>],
        function_index: u32,
    ) -> Option<RegexPlan> {
        let original = self.regex_match?;
        let boolean = self.boolean?;
        let builtin2 = self.builtin2?;
        let signature = |index: u32| signatures.get(usize::try_from(index).ok()?).copied()?;
        // Both named functions are defined ones, not imports.
        if original < self.imported_functions
            || boolean < self.imported_functions
            || signature(original)? != (2, 1)
            || signature(boolean)? != (1, 1)
            || signature(builtin2)? != (4, 1)
            || self.exports.contains_key(REGEX_EXPORT)
        {
            return None;
        }
        Some(RegexPlan {
            original,
            boolean,
            builtin2,
            type_index: *self.function_types.get(usize::try_from(original).ok()?)?,
            function_index,
        })
    }

    /// Notes the functions a constant expression names with `ref.func`.
    fn note_references(
        &mut self,
        expression: &wasmparser::ConstExpr<'_>,
    ) -> wasmparser::Result<()> {
        for operator in expression.get_operators_reader() {
            if let Operator::RefFunc { function_index } = operator? {
                self.address_taken.push(function_index);
            }
        }
        Ok(())
    }

    /// Per defined function: whether it lies on a cycle of the call graph.
    ///
    /// The table is one more node of the graph: every function with an indirect call has an
    /// edge to it, and it has an edge to every function it can hold. That finds the same cycles
    /// as an edge from every such caller to every such callee, with as many edges as there are
    /// calls and table entries rather than their product.
    fn recursive(&self) -> Vec<bool> {
        let count = self.bodies.len();
        let table = count;
        let defined = |function: u32| {
            function
                .checked_sub(self.imported_functions)
                .map(|index| index as usize)
                .filter(|&index| index < count)
        };
        let mut successors: Vec<Vec<usize>> = self
            .bodies
            .iter()
            .map(|calls| {
                let mut next: Vec<usize> =
                    calls.direct.iter().filter_map(|&f| defined(f)).collect();
                if calls.indirect {
                    next.push(table);
                }
                next.sort_unstable();
                next.dedup();
                next
            })
            .collect();
        let mut held: Vec<usize> = self
            .address_taken
            .iter()
            .filter_map(|&f| defined(f))
            .collect();
        held.sort_unstable();
        held.dedup();
        successors.push(held);
        let components = strongly_connected(&successors);
        let mut size = vec![0usize; count + 1];
        for &component in &components {
            size[component] += 1;
        }
        (0..count)
            .map(|node| size[components[node]] > 1 || successors[node].binary_search(&node).is_ok())
            .collect()
    }
}

/// The strongly connected component of every node (Tarjan's algorithm, without recursion so
/// that a deep call graph cannot overflow the host's stack).
fn strongly_connected(successors: &[Vec<usize>]) -> Vec<usize> {
    const UNSEEN: usize = usize::MAX;
    let count = successors.len();
    let mut index = vec![UNSEEN; count];
    let mut low = vec![0; count];
    let mut on_stack = vec![false; count];
    let mut stack = Vec::new();
    let mut component = vec![UNSEEN; count];
    let mut components = 0;
    let mut next_index = 0;
    // (node, how many of its successors have been visited)
    let mut path: Vec<(usize, usize)> = Vec::new();
    for root in 0..count {
        if index[root] != UNSEEN {
            continue;
        }
        path.push((root, 0));
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (node, ref mut visited)) = path.last_mut() {
            if let Some(&next) = successors[node].get(*visited) {
                *visited += 1;
                if index[next] == UNSEEN {
                    index[next] = next_index;
                    low[next] = next_index;
                    next_index += 1;
                    stack.push(next);
                    on_stack[next] = true;
                    path.push((next, 0));
                } else if on_stack[next] {
                    low[node] = low[node].min(index[next]);
                }
                continue;
            }
            path.pop();
            if let Some(&(parent, _)) = path.last() {
                low[parent] = low[parent].min(low[node]);
            }
            if low[node] == index[node] {
                while let Some(member) = stack.pop() {
                    on_stack[member] = false;
                    component[member] = components;
                    if member == node {
                        break;
                    }
                }
                components += 1;
            }
        }
    }
    component
}

/// The rewrite: the two imports added, the indices of the module's own memories and globals
/// moved past them, and the checks added to the code.
struct Meter {
    imported_memories: u32,
    imported_globals: u32,
    recursive: Vec<bool>,
    next_body: usize,
    imports_added: bool,
    /// The evaluation entry to add, when the module has what it calls.
    entry: Option<Entry>,
    /// The host's turn at `regex.match`, when the module has what it needs.
    regex: Option<RegexPlan>,
}

type Error = reencode::Error<std::convert::Infallible>;

impl Meter {
    /// The clock's memory index: right after the module's imported memories.
    fn clock(&self) -> u32 {
        self.imported_memories
    }

    /// The deadline's global index: right after the module's imported globals.
    fn deadline(&self) -> u32 {
        self.imported_globals
    }

    fn add_imports(&mut self, imports: &mut wasm_encoder::ImportSection) {
        imports.import(
            IMPORT_MODULE,
            CLOCK,
            EntityType::Memory(MemoryType {
                minimum: 1,
                maximum: Some(1),
                memory64: false,
                shared: true,
                page_size_log2: None,
            }),
        );
        imports.import(
            IMPORT_MODULE,
            DEADLINE,
            EntityType::Global(GlobalType {
                val_type: ValType::I64,
                mutable: true,
                shared: false,
            }),
        );
        self.imports_added = true;
    }

    /// `if clock >= deadline { unreachable }`: leaves the operand stack as it was.
    fn check(&self, function: &mut wasm_encoder::Function) {
        function
            .instruction(&Instruction::I32Const(0))
            .instruction(&Instruction::I64Load(MemArg {
                offset: 0,
                align: 3,
                memory_index: self.clock(),
            }))
            .instruction(&Instruction::GlobalGet(self.deadline()))
            .instruction(&Instruction::I64GeU)
            .instruction(&Instruction::If(BlockType::Empty))
            .instruction(&Instruction::Unreachable)
            .instruction(&Instruction::End);
    }
}

impl Reencode for Meter {
    type Error = std::convert::Infallible;

    // Saturating: an index past the end (the module is not valid) stays past the end, and
    // wasmtime refuses the module as it would have refused the original.
    fn memory_index(&mut self, memory: u32) -> Result<u32, Error> {
        Ok(if memory >= self.imported_memories {
            memory.saturating_add(1)
        } else {
            memory
        })
    }

    fn global_index(&mut self, global: u32) -> Result<u32, Error> {
        Ok(if global >= self.imported_globals {
            global.saturating_add(1)
        } else {
            global
        })
    }

    fn parse_import_section(
        &mut self,
        imports: &mut wasm_encoder::ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_import_section(self, imports, section)?;
        self.add_imports(imports);
        Ok(())
    }

    fn intersperse_section_hook(
        &mut self,
        module: &mut Module,
        _after: Option<SectionId>,
        before: Option<SectionId>,
    ) -> Result<(), Error> {
        // A module without imports gets an import section where one would have been.
        let past_imports = !matches!(
            before,
            Some(SectionId::Custom | SectionId::Type | SectionId::Import)
        );
        if past_imports && !self.imports_added {
            let mut imports = wasm_encoder::ImportSection::new();
            self.add_imports(&mut imports);
            module.section(&imports);
        }
        Ok(())
    }

    fn parse_type_section(
        &mut self,
        types: &mut wasm_encoder::TypeSection,
        section: wasmparser::TypeSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_type_section(self, types, section)?;
        if self.entry.is_some() {
            types.ty().function(entry::params(), entry::results());
        }
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut wasm_encoder::FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_function_section(self, functions, section)?;
        if let Some(entry) = &self.entry {
            functions.function(entry.type_index);
        }
        if let Some(regex) = &self.regex {
            functions.function(regex.type_index);
        }
        Ok(())
    }

    fn parse_export_section(
        &mut self,
        exports: &mut wasm_encoder::ExportSection,
        section: wasmparser::ExportSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_export_section(self, exports, section)?;
        if let Some(entry) = &self.entry {
            exports.export(
                entry::EXPORT,
                wasm_encoder::ExportKind::Func,
                entry.function_index,
            );
        }
        if let Some(regex) = &self.regex {
            exports.export(
                REGEX_EXPORT,
                wasm_encoder::ExportKind::Func,
                regex.function_index,
            );
        }
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut wasm_encoder::CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), Error> {
        reencode::utils::parse_code_section(self, code, section)?;
        if let Some(entry) = &self.entry {
            code.function(&entry.body);
        }
        if let Some(regex) = &self.regex {
            code.function(&regex.body());
        }
        Ok(())
    }

    fn parse_function_body(
        &mut self,
        code: &mut wasm_encoder::CodeSection,
        body: wasmparser::FunctionBody<'_>,
    ) -> Result<(), Error> {
        let mut function = self.new_function_with_parsed_locals(&body)?;
        if self.recursive.get(self.next_body).copied().unwrap_or(true) {
            self.check(&mut function);
        }
        self.next_body += 1;
        let mut reader = body.get_operators_reader()?;
        while !reader.eof() {
            let operator = reader.read()?;
            let is_loop = matches!(operator, Operator::Loop { .. });
            let instruction = match (operator, self.regex) {
                (Operator::Call { function_index }, Some(regex))
                    if function_index == regex.original =>
                {
                    Instruction::Call(regex.function_index)
                }
                (Operator::ReturnCall { function_index }, Some(regex))
                    if function_index == regex.original =>
                {
                    Instruction::ReturnCall(regex.function_index)
                }
                (operator, _) => self.instruction(operator)?,
            };
            function.instruction(&instruction);
            if is_loop {
                self.check(&mut function);
            }
        }
        code.function(&function);
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn recursive(wat: &str) -> Vec<bool> {
        let wasm = wat::parse_str(wat).expect("valid WAT");
        Shape::read(&wasm).expect("reads").recursive()
    }

    #[test]
    fn an_index_past_the_end_stays_past_the_end() {
        // Not valid: the module has one memory and one global, and names the next ones (and the
        // last possible ones). The rewrite must not make these name the clock or the deadline.
        for index in [1, u32::MAX] {
            let mut types = wasm_encoder::TypeSection::new();
            types.ty().function([], []);
            let mut imports = wasm_encoder::ImportSection::new();
            imports.import(
                "env",
                "memory",
                EntityType::Memory(MemoryType {
                    minimum: 1,
                    maximum: None,
                    memory64: false,
                    shared: false,
                    page_size_log2: None,
                }),
            );
            imports.import(
                "env",
                "g",
                EntityType::Global(GlobalType {
                    val_type: ValType::I64,
                    mutable: false,
                    shared: false,
                }),
            );
            let mut functions = wasm_encoder::FunctionSection::new();
            functions.function(0);
            let mut body = wasm_encoder::Function::new([]);
            body.instruction(&Instruction::I32Const(0))
                .instruction(&Instruction::I64Load(MemArg {
                    offset: 0,
                    align: 3,
                    memory_index: index,
                }))
                .instruction(&Instruction::GlobalGet(index))
                .instruction(&Instruction::I64GeU)
                .instruction(&Instruction::Drop)
                .instruction(&Instruction::End);
            let mut code = wasm_encoder::CodeSection::new();
            code.function(&body);
            let mut module = Module::new();
            module
                .section(&types)
                .section(&imports)
                .section(&functions)
                .section(&code);
            let metered = instrument(&module.finish())
                .expect("reads")
                .expect("has code");
            let engine = crate::runtime::engine().expect("engine");
            assert!(
                wasmtime::Module::validate(engine, &metered).is_err(),
                "index {index} became valid"
            );
        }
    }

    #[test]
    fn components_of_a_small_graph() {
        // 0 -> 1 -> 2 -> 0 is a cycle, 3 calls itself, 4 -> 5 is not a cycle.
        let successors = vec![vec![1], vec![2], vec![0, 4], vec![3], vec![5], vec![]];
        let component = strongly_connected(&successors);
        assert_eq!(component[0], component[1]);
        assert_eq!(component[1], component[2]);
        let others = [component[3], component[4], component[5]];
        assert!(others.iter().all(|c| *c != component[0]));
        assert_ne!(component[4], component[5]);
    }

    #[test]
    fn functions_on_a_cycle_are_recursive() {
        let flags = recursive(
            r#"(module
              (import "env" "f" (func $imported))
              (type $void (func))
              (table 1 funcref)
              (elem (i32.const 0) $through_table)
              (func $leaf)
              (func $calls_leaf (call $leaf) (call $imported))
              (func $itself (call $itself))
              (func $a (call $b))
              (func $b (call $a))
              (func $through_table (call_indirect (type $void) (i32.const 0)))
              (func $indirect_only (call_indirect (type $void) (i32.const 0))))"#,
        );
        // $indirect_only reaches the table, but nothing in the table reaches it back.
        assert_eq!(flags, [false, false, true, true, true, true, false]);
    }

    #[test]
    fn a_deep_chain_of_calls_is_read_without_recursion() {
        // 20,000 functions, each calling the next: no cycle, and no deep host stack either.
        let mut wat = String::from("(module");
        for index in 0..20_000 {
            wat.push_str(&format!(
                "(func $f{index} (call $f{}))",
                (index + 1) % 20_001
            ));
        }
        wat.push_str("(func $f20000 (call $f0)))");
        let flags = recursive(&wat);
        assert_eq!(flags.len(), 20_001);
        assert!(
            flags.iter().all(|&flag| flag),
            "the chain closes into one cycle"
        );
    }

    #[test]
    fn the_rewrite_runs_as_the_original_and_stops_past_the_deadline() {
        let wasm = wat::parse_str(
            r#"(module
              (import "env" "memory" (memory 1))
              (import "env" "g" (global $imported i32))
              (memory $own 1)
              (global $counter (mut i32) (i32.const 0))
              (func (export "run") (param $n i32) (result i32)
                (loop $again
                  (global.set $counter (i32.add (global.get $counter) (global.get $imported)))
                  (i32.store $own (i32.const 0) (global.get $counter))
                  (br_if $again (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
                (i32.load $own (i32.const 0))))"#,
        )
        .expect("valid WAT");
        let metered = instrument(&wasm).expect("rewrites").expect("has code");
        let module = wasmtime::Module::new(crate::runtime::engine().expect("engine"), &metered)
            .expect("the rewritten module is valid");
        let imports: Vec<String> = module
            .imports()
            .map(|import| format!("{}.{}", import.module(), import.name()))
            .collect();
        assert_eq!(
            imports,
            [
                "env.memory",
                "env.g",
                "portcullis.clock",
                "portcullis.deadline"
            ]
        );
        // It runs as the original would: its own memory and global, not the added ones.
        use wasmtime::{Global, GlobalType, Instance, Memory, Mutability, Store, Val};
        let mut store = Store::new(module.engine(), ());
        let memory = Memory::new(&mut store, wasmtime::MemoryType::new(1, None)).expect("memory");
        let constant = |store: &mut Store<()>, value: Val, mutability| {
            let ty = GlobalType::new(value.ty(&*store).expect("type"), mutability);
            Global::new(store, ty, value).expect("global")
        };
        let imported = constant(&mut store, Val::I32(3), Mutability::Const);
        let deadline = constant(&mut store, Val::I64(i64::MAX), Mutability::Var);
        let clock = crate::runtime::clock_memory();
        let instance = Instance::new(
            &mut store,
            &module,
            &[
                memory.into(),
                imported.into(),
                clock.into(),
                deadline.into(),
            ],
        )
        .expect("instantiates");
        let run = instance
            .get_typed_func::<i32, i32>(&mut store, "run")
            .expect("run");
        assert_eq!(run.call(&mut store, 4).expect("runs"), 12);
        assert_eq!(memory.data(&store)[..4], [0; 4], "env.memory is untouched");
        // With the deadline passed, the loop traps at its first iteration.
        deadline.set(&mut store, Val::I64(0)).expect("set");
        let trap = run.call(&mut store, 4).expect_err("past the deadline");
        assert_eq!(
            trap.downcast_ref::<wasmtime::Trap>(),
            Some(&wasmtime::Trap::UnreachableCodeReached)
        );
        // A module without code is left as it is.
        let empty =
            wat::parse_str(r#"(module (import "env" "memory" (memory 1)))"#).expect("valid WAT");
        assert_eq!(instrument(&empty), Ok(None));
    }
}
