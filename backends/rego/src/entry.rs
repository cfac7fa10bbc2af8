//! The evaluation entry added to a module when it is compiled: one exported function that does
//! what the host would otherwise do in eight calls, and leaves the result as a value.
//!
//! `portcullis_eval(entrypoint, data, input, len, heap, mode) -> (code, result, heap_end)`
//! takes the input, makes an evaluation context with the data document and the entrypoint, runs
//! `eval`, and returns its code, the result set (a value in guest memory, not its JSON) and the
//! heap pointer after it. The input, by `mode`:
//! - [`MODE_PARSE`]: its JSON (`len` bytes) was written just above the post-data heap and
//!   `heap` is its end: the heap pointer is set there, as OPA's own `opa_eval` does, and the
//!   module's own parser reads it;
//! - [`MODE_KEEP`]: the heap is kept (a module whose builtins cache compiled patterns: setting
//!   the heap pointer would clear the caches). The JSON was written at a scratch place above
//!   the heap; it is copied into a block from `opa_malloc` and parsed there;
//! - [`MODE_BUILT`]: the host built the input as the guest's values above the post-data heap
//!   (see `runtime::image`); `input` is its root and `heap` the end of its blocks;
//! - [`MODE_KEEP_BUILT`]: the heap is kept, and the host built the input inside a block it had
//!   the guest's allocator make; `input` is its root.
//!
//! The host reads the result set from guest memory itself (see `runtime::result`): OPA's JSON
//! dump inside the guest costs more than the rest of a small evaluation.
//!
//! The entry is built only from the module's exported functions, found by name and checked by
//! type; a module lacking one (or defining its own `portcullis_eval`) gets no entry and is
//! evaluated as before.

use std::collections::HashMap;

use wasm_encoder::{BlockType, Function, Instruction, ValType};

/// The name of the added export.
pub(crate) const EXPORT: &str = "portcullis_eval";

/// `mode`: the input's JSON is at `input`; the heap pointer is set to `heap` first.
pub(crate) const MODE_PARSE: i32 = 0;
/// `mode`: the heap is kept; the input's JSON is at a scratch place, copied into a block of the
/// guest's allocator and parsed there.
pub(crate) const MODE_KEEP: i32 = 1;
/// `mode`: the input is already a value at `input` (built by the host, see `runtime::image`),
/// and `heap` is the end of its blocks: the heap pointer is set there.
pub(crate) const MODE_BUILT: i32 = 2;
/// `mode`: the heap is kept, and the input is already a value at `input`, built by the host in a
/// block it had `opa_malloc` make for it.
pub(crate) const MODE_KEEP_BUILT: i32 = 3;

/// A function type: parameters and results, `i32` only (anything else is `None`).
pub(crate) type Signature = (usize, usize);

/// What the rewrite adds for the entry.
pub(crate) struct Entry {
    /// The index of the added type.
    pub(crate) type_index: u32,
    /// The index of the added function.
    pub(crate) function_index: u32,
    pub(crate) body: Function,
}

/// The exports the entry calls, by function index.
struct Calls {
    malloc: u32,
    heap_ptr_set: u32,
    heap_ptr_get: u32,
    parse: u32,
    ctx_new: u32,
    set_input: u32,
    set_data: u32,
    set_entrypoint: Option<u32>,
    eval: u32,
    get_result: u32,
}

/// The entry for a module, or `None` when it lacks what the entry calls.
///
/// `signatures[f]` is the signature of function `f` (imported ones first), `None` when it is not
/// all `i32`; `exports` maps exported function names to indices; `types` is how many types the
/// module declares (the entry's type comes next) and `functions` how many functions (imported
/// and defined) it has. `memory_zero` says that memory 0 is the module's only memory (OPA's
/// `env.memory`).
pub(crate) fn plan(
    signatures: &[Option<Signature>],
    exports: &HashMap<String, u32>,
    types: u32,
    functions: u32,
    memory_zero: bool,
) -> Option<Entry> {
    if !memory_zero || exports.contains_key(EXPORT) {
        return None;
    }
    let find = |name: &str, signature: Signature| -> Option<u32> {
        let index = *exports.get(name)?;
        (signatures.get(usize::try_from(index).ok()?)?.as_ref() == Some(&signature))
            .then_some(index)
    };
    let calls = Calls {
        malloc: find("opa_malloc", (1, 1))?,
        heap_ptr_set: find("opa_heap_ptr_set", (1, 0))?,
        heap_ptr_get: find("opa_heap_ptr_get", (0, 1))?,
        // `opa_value_parse` is what OPA's `opa_eval` parses the input with (ABI 1.2 on).
        parse: find("opa_value_parse", (2, 1)).or_else(|| find("opa_json_parse", (2, 1)))?,
        ctx_new: find("opa_eval_ctx_new", (0, 1))?,
        set_input: find("opa_eval_ctx_set_input", (2, 0))?,
        set_data: find("opa_eval_ctx_set_data", (2, 0))?,
        set_entrypoint: match exports.get("opa_eval_ctx_set_entrypoint") {
            Some(_) => Some(find("opa_eval_ctx_set_entrypoint", (2, 0))?),
            None => None,
        },
        eval: find("eval", (1, 1))?,
        get_result: find("opa_eval_ctx_get_result", (1, 1))?,
    };
    Some(Entry {
        type_index: types,
        function_index: functions,
        body: body(&calls),
    })
}

/// The parameter and result types of the entry.
pub(crate) fn params() -> [ValType; 6] {
    [ValType::I32; 6]
}

/// See [`params`].
pub(crate) fn results() -> [ValType; 3] {
    [ValType::I32; 3]
}

fn body(calls: &Calls) -> Function {
    const ENTRYPOINT: u32 = 0;
    const DATA: u32 = 1;
    const INPUT: u32 = 2;
    const LEN: u32 = 3;
    const HEAP: u32 = 4;
    const MODE: u32 = 5;
    const CTX: u32 = 6;
    const VALUE: u32 = 7;
    let mut f = Function::new([(2, ValType::I32)]);
    let call = |f: &mut Function, index: u32| {
        f.instruction(&Instruction::Call(index));
    };
    f.instruction(&Instruction::LocalGet(MODE));
    f.instruction(&Instruction::I32Const(MODE_KEEP));
    f.instruction(&Instruction::I32Eq);
    f.instruction(&Instruction::If(BlockType::Empty));
    {
        // input = opa_malloc(len) with the input copied in; value = parse(input, len)
        f.instruction(&Instruction::LocalGet(LEN));
        call(&mut f, calls.malloc);
        f.instruction(&Instruction::LocalTee(VALUE));
        f.instruction(&Instruction::LocalGet(INPUT));
        f.instruction(&Instruction::LocalGet(LEN));
        f.instruction(&Instruction::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        });
        f.instruction(&Instruction::LocalGet(VALUE));
        f.instruction(&Instruction::LocalGet(LEN));
        call(&mut f, calls.parse);
        f.instruction(&Instruction::LocalSet(VALUE));
    }
    f.instruction(&Instruction::Else);
    {
        // if mode != kept-built { opa_heap_ptr_set(heap) }
        // value = mode is built or kept-built ? input : parse(input, len)
        f.instruction(&Instruction::LocalGet(MODE));
        f.instruction(&Instruction::I32Const(MODE_KEEP_BUILT));
        f.instruction(&Instruction::I32Ne);
        f.instruction(&Instruction::If(BlockType::Empty));
        f.instruction(&Instruction::LocalGet(HEAP));
        call(&mut f, calls.heap_ptr_set);
        f.instruction(&Instruction::End);
        f.instruction(&Instruction::LocalGet(MODE));
        f.instruction(&Instruction::I32Const(MODE_BUILT));
        f.instruction(&Instruction::I32GeS);
        f.instruction(&Instruction::If(BlockType::Result(ValType::I32)));
        f.instruction(&Instruction::LocalGet(INPUT));
        f.instruction(&Instruction::Else);
        f.instruction(&Instruction::LocalGet(INPUT));
        f.instruction(&Instruction::LocalGet(LEN));
        call(&mut f, calls.parse);
        f.instruction(&Instruction::End);
        f.instruction(&Instruction::LocalSet(VALUE));
    }
    f.instruction(&Instruction::End);
    // A failed parse is code -1.
    f.instruction(&Instruction::LocalGet(VALUE));
    f.instruction(&Instruction::I32Eqz);
    f.instruction(&Instruction::If(BlockType::Empty));
    {
        f.instruction(&Instruction::I32Const(-1));
        f.instruction(&Instruction::I32Const(0));
        call(&mut f, calls.heap_ptr_get);
        f.instruction(&Instruction::Return);
    }
    f.instruction(&Instruction::End);
    call(&mut f, calls.ctx_new);
    f.instruction(&Instruction::LocalSet(CTX));
    for (setter, value) in [(calls.set_input, VALUE), (calls.set_data, DATA)]
        .into_iter()
        .chain(calls.set_entrypoint.map(|setter| (setter, ENTRYPOINT)))
    {
        f.instruction(&Instruction::LocalGet(CTX));
        f.instruction(&Instruction::LocalGet(value));
        call(&mut f, setter);
    }
    // (eval(ctx), opa_eval_ctx_get_result(ctx), opa_heap_ptr_get())
    f.instruction(&Instruction::LocalGet(CTX));
    call(&mut f, calls.eval);
    f.instruction(&Instruction::LocalGet(CTX));
    call(&mut f, calls.get_result);
    call(&mut f, calls.heap_ptr_get);
    f.instruction(&Instruction::End);
    f
}
