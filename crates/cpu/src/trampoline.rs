//! The generated trampoline: the C (or C++) function every artifact exports, which calls the
//! kernel's entry with its tensor pointers and typed scalars in the signature's order.

use std::fmt::Write as _;

use tunebox_protocol::{Arg, BenchmarkRequest, CKernel, DType, ScalarKind};

use crate::toolchain::Language;

/// Symbol of the generated trampoline in every artifact.
pub(crate) const TRAMPOLINE_SYMBOL: &str = "tunebox_trampoline";

/// The arguments a kernel is called with: one pointer per tensor, one value per scalar, in an
/// order.
///
/// It decides the generated trampoline, so it is part of the cache key: compile with the
/// signature of the request you will run. The default order with `int64_t` scalars generates the
/// trampoline of earlier versions byte for byte, so their cache entries stay valid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signature {
    /// Element type of each tensor argument, by tensor index (`f32` is passed as `float *`, …).
    pub tensors: Vec<DType>,
    /// C type of each scalar argument, by scalar index.
    pub scalars: Vec<ScalarKind>,
    /// The order of the arguments ([`BenchmarkRequest::args`]); empty: every tensor, then every
    /// scalar.
    pub args: Vec<Arg>,
}

impl Signature {
    /// `tensors` pointer arguments of these element types, then `scalars` `int64_t`s.
    pub fn new(tensors: impl Into<Vec<DType>>, scalars: usize) -> Self {
        Self::with_scalars(tensors, vec![ScalarKind::I64; scalars])
    }

    /// `tensors` pointer arguments, then one scalar of each of these C types.
    pub fn with_scalars(
        tensors: impl Into<Vec<DType>>,
        scalars: impl Into<Vec<ScalarKind>>,
    ) -> Self {
        Self {
            tensors: tensors.into(),
            scalars: scalars.into(),
            args: Vec::new(),
        }
    }

    /// The same arguments in the order `args` (see [`BenchmarkRequest::args`]).
    pub fn args(mut self, args: impl Into<Vec<Arg>>) -> Self {
        self.args = args.into();
        self
    }

    /// The signature `request`'s kernel is called with: its tensors' dtypes, its scalars'
    /// kinds and its argument order (checked when compiling).
    pub fn of(request: &BenchmarkRequest) -> Self {
        Self {
            tensors: request.tensors.iter().map(|t| t.dtype).collect(),
            scalars: request.scalars.iter().map(|s| s.kind).collect(),
            args: request.args.clone(),
        }
    }
}

fn c_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U8 => "uint8_t",
    }
}

/// The C trampoline that calls `entry` with `signature`'s arguments in its order, one per line
/// so that a diagnostic points at the offending argument. Every scalar travels in an 8-byte slot
/// of `scalars` ([`Scalar::slot`](tunebox_protocol::Scalar::slot)): an `int64_t` is the slot, an
/// `int32_t` its cast, a `float` or `double` copied out of it. For C++ the trampoline is
/// `extern "C"` (so that its symbol is not mangled), and an untyped tensor converts to the
/// parameter's pointer type through a template conversion.
///
/// The default order with `int64_t` scalars, in C, gives the text of earlier versions byte for
/// byte (their cache keys hash it).
///
/// # Errors
///
/// The argument order does not name each tensor and scalar exactly once ([`Arg::resolve`]).
pub(crate) fn trampoline(
    entry: &str,
    signature: &Signature,
    language: Language,
) -> Result<String, String> {
    let order = Arg::resolve(
        &signature.args,
        signature.tensors.len(),
        signature.scalars.len(),
    )?;
    let mut args = String::new();
    let mut locals = String::new();
    let mut untyped = false;
    for arg in order {
        let sep = if args.is_empty() { "" } else { "," };
        let i = arg.index() as usize;
        let _ = match arg {
            Arg::Tensor(_) => write!(
                args,
                "{sep}\n        ({} *)tunebox_tensors[{i}]",
                c_type(signature.tensors[i])
            ),
            Arg::Untyped(_) if language == Language::Cxx => {
                untyped = true;
                write!(
                    args,
                    "{sep}\n        tunebox_untyped{{tunebox_tensors[{i}]}}"
                )
            }
            Arg::Untyped(_) => write!(args, "{sep}\n        tunebox_tensors[{i}]"),
            Arg::Scalar(_) => scalar_argument(signature.scalars[i], i, sep, &mut args, &mut locals),
        };
    }
    let (linkage, helper) = match language {
        Language::C => ("", ""),
        Language::Cxx => ("extern \"C\" ", if untyped { CXX_UNTYPED } else { "" }),
    };
    Ok(format!(
        "#line 1 \"<tunebox trampoline>\"\n\
         #include <stdint.h>\n\
         {helper}\
         {linkage}__attribute__((visibility(\"default\")))\n\
         void {TRAMPOLINE_SYMBOL}(void *const *tunebox_tensors, const int64_t *tunebox_scalars);\n\
         {linkage}void {TRAMPOLINE_SYMBOL}(void *const *tunebox_tensors, \
         const int64_t *tunebox_scalars) {{\n    \
             (void)tunebox_tensors;\n    \
             (void)tunebox_scalars;\n\
         {locals}    \
             {entry}({args});\n\
         }}\n"
    ))
}

/// Appends scalar `i` (of `kind`) to the entry's `args` (after `sep`): its 8-byte slot read as
/// an `int64_t` or `int32_t`, or a float or double copied out of it into a local (declared in
/// `locals`).
fn scalar_argument(
    kind: ScalarKind,
    i: usize,
    sep: &str,
    args: &mut String,
    locals: &mut String,
) -> std::fmt::Result {
    match kind {
        ScalarKind::I64 => write!(args, "{sep}\n        tunebox_scalars[{i}]"),
        ScalarKind::I32 => write!(args, "{sep}\n        (int32_t)tunebox_scalars[{i}]"),
        ScalarKind::F32 | ScalarKind::F64 => {
            let _ = write!(
                locals,
                "    {c} tunebox_scalar_{i};\n    \
                 __builtin_memcpy(&tunebox_scalar_{i}, &tunebox_scalars[{i}], sizeof \
                 tunebox_scalar_{i});\n",
                c = kind.c_type()
            );
            write!(args, "{sep}\n        tunebox_scalar_{i}")
        }
    }
}

/// C++ has no implicit conversion from `void *`: an untyped tensor converts to whatever pointer
/// type the parameter has through this template.
const CXX_UNTYPED: &str = "struct tunebox_untyped {\n    \
    void *tunebox_pointer;\n    \
    template <typename TuneboxT> operator TuneboxT *() const {\n        \
        return static_cast<TuneboxT *>(tunebox_pointer);\n    \
    }\n\
};\n";

/// The translation unit: the user's source under its own name and line numbers, then the
/// trampoline.
pub(crate) fn combined_source(kernel: &CKernel, trampoline: &str) -> String {
    let mut text = format!("#line 1 \"{}\"\n", c_string_body(&kernel.source_name));
    text.push_str(&kernel.source);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(trampoline);
    text
}

/// `s` escaped for the inside of a C string literal; control characters become `?`.
fn c_string_body(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::test_kernel as kernel;

    #[test]
    fn trampoline_casts_tensors_and_passes_scalars() {
        let text = trampoline(
            "add",
            &Signature::new([DType::F32, DType::U8], 2),
            Language::C,
        )
        .unwrap();
        assert!(
            text.contains(
                "void tunebox_trampoline(void *const *tunebox_tensors, const int64_t *tunebox_scalars) {"
            )
        );
        assert!(text.contains(
            "    add(\n        (float *)tunebox_tensors[0],\n        (uint8_t *)tunebox_tensors[1],\n        \
             tunebox_scalars[0],\n        tunebox_scalars[1]);\n"
        ));
        assert!(
            trampoline("nop", &Signature::new([], 0), Language::C)
                .unwrap()
                .contains("    nop();\n")
        );
    }

    /// The default order's text (the kernel cache's keys hash it): the same for the order
    /// given explicitly. Its names are tunebox's own, so that no macro or param of the
    /// kernel's (`-DT=4`, a `tensors` define) reaches into it; the names of tunebox 0.x
    /// (`tensors`, `scalars`, and `T` and `pointer` in C++) broke such kernels' compile.
    #[test]
    fn the_default_order_gives_one_text_of_tunebox_names() {
        let text = "#line 1 \"<tunebox trampoline>\"\n#include <stdint.h>\n\
                    __attribute__((visibility(\"default\")))\n\
                    void tunebox_trampoline(void *const *tunebox_tensors, const int64_t \
                    *tunebox_scalars);\n\
                    void tunebox_trampoline(void *const *tunebox_tensors, const int64_t \
                    *tunebox_scalars) {\n    (void)tunebox_tensors;\n    (void)tunebox_scalars;\n    \
                    add(\n        (float *)tunebox_tensors[0],\n        \
                    (uint8_t *)tunebox_tensors[1],\n        tunebox_scalars[0],\n        \
                    tunebox_scalars[1]);\n}\n";
        let signature = Signature::new([DType::F32, DType::U8], 2);
        assert_eq!(trampoline("add", &signature, Language::C).unwrap(), text);
        let explicit = signature.clone().args([
            Arg::Tensor(0),
            Arg::Tensor(1),
            Arg::Scalar(0),
            Arg::Scalar(1),
        ]);
        assert_eq!(trampoline("add", &explicit, Language::C).unwrap(), text);
    }

    #[test]
    fn trampoline_follows_the_order_and_the_scalar_kinds() {
        let signature = Signature::with_scalars(
            [DType::F32, DType::F64],
            [
                ScalarKind::I32,
                ScalarKind::F32,
                ScalarKind::F64,
                ScalarKind::I64,
            ],
        )
        .args([
            Arg::Scalar(0),
            Arg::Tensor(1),
            Arg::Scalar(1),
            Arg::Untyped(0),
            Arg::Scalar(2),
            Arg::Scalar(3),
        ]);
        let text = trampoline("k", &signature, Language::C).unwrap();
        assert!(
            text.contains(
                "    float tunebox_scalar_1;\n    __builtin_memcpy(&tunebox_scalar_1, \
                 &tunebox_scalars[1], sizeof tunebox_scalar_1);\n"
            ) && text.contains("    double tunebox_scalar_2;\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "    k(\n        (int32_t)tunebox_scalars[0],\n        \
                 (double *)tunebox_tensors[1],\n        tunebox_scalar_1,\n        \
                 tunebox_tensors[0],\n        tunebox_scalar_2,\n        tunebox_scalars[3]);\n"
            ),
            "{text}"
        );
        assert!(!text.contains("extern"), "{text}");
        let cxx = trampoline("k", &signature, Language::Cxx).unwrap();
        assert!(
            cxx.contains("extern \"C\" void tunebox_trampoline(")
                && cxx.contains("struct tunebox_untyped {")
                && cxx.contains("        tunebox_untyped{tunebox_tensors[0]},\n"),
            "{cxx}"
        );
    }

    #[test]
    fn a_bad_order_is_refused() {
        let signature = Signature::new([DType::F32], 1);
        let err =
            |args: &[Arg]| trampoline("k", &signature.clone().args(args), Language::C).unwrap_err();
        let twice = err(&[Arg::Tensor(0), Arg::Scalar(0), Arg::Untyped(0)]);
        assert!(twice.contains("tensor 0 is given twice"), "{twice}");
        let missing = err(&[Arg::Tensor(0)]);
        assert!(missing.contains("scalar 0 is missing"), "{missing}");
        let range = err(&[Arg::Tensor(0), Arg::Scalar(1)]);
        assert!(
            range.contains(
                "argument 1 of the argument order is scalar 1, but the request has 1 \
                            scalars"
            ),
            "{range}"
        );
    }

    #[test]
    fn source_keeps_user_lines_and_escapes_the_name() {
        let mut k = kernel();
        k.source_name = "dir\\a \"b\"\n.c".into();
        let text = combined_source(&k, "T");
        assert!(
            text.starts_with("#line 1 \"dir\\\\a \\\"b\\\"?.c\"\nvoid k"),
            "{text}"
        );
        assert!(text.ends_with("}\nT"));
    }
}
