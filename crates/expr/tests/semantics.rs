//! Python's semantics, rule by rule, with the examples of issue 16 and the restrictions of the
//! FAIR benchmark hub's T1 files. Expected values were computed with CPython 3.11.

use proptest::prelude::*;
use tunebox_expr::{Expr, ExprError, Value};

/// Evaluates `text` with `vars` bound by name.
fn eval<'a>(text: &str, vars: &[(&str, Value<'a>)]) -> Result<String, ExprError> {
    let names: Vec<&str> = vars.iter().map(|(n, _)| *n).collect();
    let values: Vec<Value<'a>> = vars.iter().map(|(_, v)| *v).collect();
    let compiled = Expr::parse(text)?.bind(&names)?;
    compiled.eval(&values).map(|v| v.to_string())
}

/// The repr of a constant expression.
fn py(text: &str) -> String {
    eval(text, &[]).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The Python exception a constant expression raises.
fn raises(text: &str) -> &'static str {
    let e = eval(text, &[]).expect_err(text);
    e.python_exception()
        .unwrap_or_else(|| panic!("{text}: {e}"))
}

/// How many points of the grid `xs` x `ys` satisfy `text` over `x`, `y`.
fn count(text: &str, xs: &[i64], ys: &[i64]) -> usize {
    let c = Expr::parse(text).unwrap().bind(&["x", "y"]).unwrap();
    xs.iter()
        .flat_map(|x| ys.iter().map(move |y| (*x, *y)))
        .filter(|(x, y)| c.eval_bool(&[Value::Int(*x), Value::Int(*y)]).unwrap())
        .count()
}

#[test]
fn chained_comparisons_mean_and() {
    let d: Vec<i64> = (1..=16).collect();
    assert_eq!(count("x == y == 1", &d, &d), 1);
    assert_eq!(count("x != y != 1", &d, &d), 225);
    let pow2: Vec<i64> = (0..=10).map(|k| 1 << k).collect();
    assert_eq!(count("32 <= x * y <= 1024", &pow2, &pow2), 51);
    assert_eq!(py("1 < 2 < 3 > 2 != 5"), "True");
    assert_eq!(py("1 < 3 < 2"), "False");
    // The middle operand is evaluated once: a division by zero on the right is not reached.
    assert_eq!(py("2 < 1 < 1 / 0"), "False");
}

#[test]
fn true_division_floor_division_and_modulo() {
    let sizes = [16, 32, 48, 64, 96, 128, 256];
    assert_eq!(count("x / 32 >= 0.5", &sizes, &[0]), 7);
    let d: Vec<i64> = (1..=5).collect();
    assert_eq!(count("x / y > 2", &d, &d), 4);
    assert_eq!(py("7 / 2"), "3.5");
    assert_eq!(py("4 / 2"), "2.0");
    assert_eq!(py("(-7) // 2"), "-4");
    assert_eq!(py("(-7) % 2"), "1");
    assert_eq!(py("7 % -2"), "-1");
    assert_eq!(py("-7 // 2"), "-4");
    assert_eq!(py("(-7.0) // 2"), "-4.0");
    assert_eq!(py("(-7.5) % 2"), "0.5");
    assert_eq!(py("7.5 % -2"), "-0.5");
    assert_eq!(py("-2 ** 2"), "-4");
    for text in ["1 / 0", "1 // 0", "1 % 0", "1.0 / 0", "1 % 0.0", "0 ** -1"] {
        assert_eq!(raises(text), "ZeroDivisionError", "{text}");
    }
}

#[test]
fn ints_and_floats_mix_as_in_python() {
    let f = [("f", Value::Float(1.0))];
    assert_eq!(eval("f == 1", &f).unwrap(), "True");
    let xy = [("x", Value::Float(2.0)), ("y", Value::Float(5.0))];
    assert_eq!(eval("y % x == 1", &xy).unwrap(), "True");
    assert_eq!(py("1 + 2.0"), "3.0");
    assert_eq!(py("2 * 0.5 == 1"), "True");
    assert_eq!(py("9007199254740993 == 9007199254740992.0"), "False");
    assert_eq!(py("2 ** 10"), "1024");
    assert_eq!(py("2 ** -1"), "0.5");
    assert_eq!(py("4 ** 0.5"), "2.0");
    assert_eq!(py("2.0 ** 3"), "8.0");
    assert_eq!(py("pow(3, 2)"), "9");
    assert_eq!(raises("10.0 ** 400"), "OverflowError");
}

#[test]
fn bools_are_ints() {
    assert_eq!(py("True + 1 == 2"), "True");
    assert_eq!(py("True == 1"), "True");
    assert_eq!(py("True + True"), "2");
    assert_eq!(py("True & False"), "False");
    assert_eq!(py("~True"), "-2");
    assert_eq!(py("-True"), "-1");
}

#[test]
fn membership_bits_truthiness_and_conditionals() {
    let x = |v| [("x", Value::Int(v))];
    let d: Vec<i64> = (0..10).collect();
    assert_eq!(count("x in [1, 2, 4]", &d, &[0]), 3);
    assert_eq!(count("x not in (1, 2, 4)", &d, &[0]), 7);
    assert_eq!(eval("x in (3,)", &x(3)).unwrap(), "True");
    assert_eq!(eval("x in ()", &x(3)).unwrap(), "False");
    assert_eq!(eval("x in [1.0, 3.0]", &x(3)).unwrap(), "True");
    assert_eq!(py("6 & 3"), "2");
    assert_eq!(py("6 | 3"), "7");
    assert_eq!(py("6 ^ 3"), "5");
    assert_eq!(py("~6"), "-7");
    assert_eq!(py("1 << 10"), "1024");
    assert_eq!(py("-16 >> 2"), "-4");
    assert_eq!(raises("1.0 & 1"), "TypeError");
    assert_eq!(raises("1 << -1"), "ValueError");
    // `a % b` as a condition: true when not divisible.
    assert_eq!(count("x % y", &[6], &[1, 2, 3, 4, 5]), 2);
    assert_eq!(py("0 or 5"), "5");
    assert_eq!(py("3 and 0.0"), "0.0");
    assert_eq!(py("'' or 'NHWC'"), "'NHWC'");
    assert_eq!(py("not 0"), "True");
    assert_eq!(py("1 if 0 else 2.5"), "2.5");
    assert_eq!(py("'a' if 1 < 2 else 'b'"), "'a'");
    // The skipped operand is not evaluated.
    let zero = [("a", Value::Int(4)), ("b", Value::Int(0))];
    assert_eq!(eval("b != 0 and a % b == 0", &zero).unwrap(), "False");
    assert_eq!(eval("a % b if b else 1", &zero).unwrap(), "1");
}

#[test]
fn literals() {
    assert_eq!(py("1e3"), "1000.0");
    assert_eq!(py("0.5"), "0.5");
    assert_eq!(py(".5"), "0.5");
    assert_eq!(py("1."), "1.0");
    assert_eq!(py("0x10"), "16");
    assert_eq!(py("0o17 + 0b101"), "20");
    assert_eq!(py("1_000"), "1000");
    assert_eq!(py("True"), "True");
    assert_eq!(py("\"NHWC\" == 'NHWC'"), "True");
    assert_eq!(py("'it\\'s'"), "\"it's\"");
}

#[test]
fn builtins() {
    assert_eq!(py("min(3, 1.0, 2)"), "1.0");
    assert_eq!(py("min(1, 1.0)"), "1");
    assert_eq!(py("max([4, 9, 2])"), "9");
    assert_eq!(py("abs(-3)"), "3");
    assert_eq!(py("abs(-2.5)"), "2.5");
    assert_eq!(py("int(-2.7)"), "-2");
    assert_eq!(py("int(True)"), "1");
    assert_eq!(py("float(3)"), "3.0");
    assert_eq!(py("round(2.5)"), "2");
    assert_eq!(py("round(3.5)"), "4");
    assert_eq!(py("round(-2.5)"), "-2");
    assert_eq!(py("round(2.675, 2)"), "2.67");
    assert_eq!(py("round(1250, -2)"), "1200");
    assert_eq!(py("round(1234.5678, 1)"), "1234.6");
    assert_eq!(py("math.ceil(2.1)"), "3");
    assert_eq!(py("math.floor(-2.1)"), "-3");
    assert_eq!(py("math.log2(1024)"), "10.0");
    assert_eq!(py("math.sqrt(16)"), "4.0");
    assert_eq!(py("math.log(8, 2)"), "3.0");
    assert_eq!(py("math.log10(1000)"), "3.0");
    assert_eq!(raises("math.sqrt(-1)"), "ValueError");
    assert_eq!(raises("math.log(0)"), "ValueError");
    assert_eq!(raises("min([])"), "ValueError");
    // tunebox's launch helper, -(-a // b) (launch_cases.txt checks it against CPython).
    assert_eq!(py("ceil_div(1000, 64)"), "16");
    assert_eq!(py("ceil_div(-7, 2)"), "-3");
    assert_eq!(py("ceil_div(7.0, 2)"), "4.0");
    assert_eq!(raises("ceil_div(1, 0)"), "ZeroDivisionError");
}

#[test]
fn strings() {
    let layout = [("layout", Value::Str("NHWC"))];
    assert_eq!(eval("layout == 'NHWC'", &layout).unwrap(), "True");
    assert_eq!(eval("layout != \"NCHW\"", &layout).unwrap(), "True");
    assert_eq!(eval("layout in ['NCHW', 'NHWC']", &layout).unwrap(), "True");
    assert_eq!(eval("'HW' in layout", &layout).unwrap(), "True");
    assert_eq!(eval("layout == 1", &layout).unwrap(), "False");
    assert!(matches!(
        eval("layout < 1", &layout),
        Err(ExprError::Type { .. })
    ));
    assert!(matches!(
        eval("layout + layout", &layout),
        Err(ExprError::Unsupported { .. })
    ));
}

#[test]
fn metrics_with_powers() {
    let vars = [
        ("M", Value::Int(1024)),
        ("N", Value::Int(1024)),
        ("K", Value::Int(1024)),
        ("time", Value::Float(2.0)),
    ];
    assert_eq!(
        eval("2 * M * N * K / (time / 1e3) / 1e9", &vars).unwrap(),
        "1073.741824"
    );
    assert_eq!(eval("(M ** 2 * 4) / 2 ** 20", &vars).unwrap(), "4.0");
}

#[test]
fn errors_name_the_restriction_and_the_part() {
    let e = eval(
        "a * b > 0",
        &[("a", Value::Int(1 << 40)), ("b", Value::Int(1 << 40))],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "`a * b > 0`: integer overflow in `a * b` (the result does not fit in 64 bits)"
    );
    assert_eq!(e.python_exception(), None);
    let e = eval("x > 0 and 1 in 2", &[("x", Value::Int(1))]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "`x > 0 and 1 in 2`: argument of type 'int' is not iterable in `1 in 2`"
    );
    let e = eval(
        "KWG % (MDIMC - 8) == 0",
        &[("KWG", Value::Int(16)), ("MDIMC", Value::Int(8))],
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "`KWG % (MDIMC - 8) == 0`: integer modulo by zero in `KWG % (MDIMC - 8)`"
    );
}

#[test]
fn parse_errors_say_where_and_what() {
    let e = Expr::parse("32 <= <= 1024").unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot parse `32 <= <= 1024`: at column 7, expected a value, a name or `(`, found `<=`"
    );
    let e = Expr::parse("x = 1").unwrap_err();
    assert!(e.to_string().contains("expected `==` to compare"), "{e}");
    let e = Expr::parse("sin(x)").unwrap_err();
    assert!(e.to_string().contains("found a call of `sin`"), "{e}");
    let e = Expr::parse("(x + 1").unwrap_err();
    assert!(
        e.to_string().contains("found the end of the expression"),
        "{e}"
    );
    let e = Expr::parse("x is None").unwrap_err();
    assert!(e.to_string().contains("`is` is not supported"), "{e}");
    let e = Expr::parse("[1, 2] == x").unwrap_err();
    assert!(e.to_string().contains("lists and tuples"), "{e}");
    assert!(Expr::parse("012").is_err());
    assert!(Expr::parse("1j").is_err());
}

#[test]
fn variables_and_binding() {
    let e = Expr::parse("b * a + min(a, c) + math.pi").unwrap();
    assert_eq!(e.variables(), ["b", "a", "c"]);
    let c = e.bind(&["a", "b", "c", "unused"]).unwrap();
    assert_eq!(c.slots(), [1, 0, 2]);
    let err = e.bind(&["a", "b"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`b * a + min(a, c) + math.pi` uses `c`, which is not one of: a, b"
    );
    assert!(matches!(
        c.eval(&[Value::Int(1)]),
        Err(ExprError::BindingCount {
            expected: 4,
            got: 1,
            ..
        })
    ));
}

/// The restrictions of the four T1 files of data/benchmark_hub/kernels, over their
/// parameters; the counts are Python's (convolution and dedispersion also in that folder's
/// README).
#[test]
fn benchmark_hub_restrictions() {
    struct Space {
        params: &'static [(&'static str, &'static [i64])],
        restrictions: &'static [&'static str],
        /// Check every `step`-th configuration only.
        step: usize,
        valid: usize,
    }
    let spaces = [
        Space {
            params: &[
                (
                    "block_size_x",
                    &[
                        16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
                    ],
                ),
                ("block_size_y", &[1, 2, 4, 8, 16]),
                ("tile_size_x", &[1, 2, 3, 4]),
                ("tile_size_y", &[1, 2, 3, 4]),
                ("read_only", &[0, 1]),
                ("use_padding", &[0, 1]),
                ("use_shmem", &[0, 1]),
                ("use_cmem", &[1]),
                ("filter_height", &[15]),
                ("filter_width", &[15]),
            ],
            restrictions: &[
                "use_padding==0 or block_size_x % 32 != 0",
                "block_size_x*block_size_y<=1024",
                "use_padding==0 or use_shmem != 0",
                "use_shmem == 0 or (((block_size_x*tile_size_x+(filter_width-1)))*((block_size_y*tile_size_y+(filter_height-1)))) < 12*1024",
            ],
            step: 1,
            valid: 4362,
        },
        Space {
            params: &[
                ("block_size_x", &[1, 2, 4, 8, 16, 32]),
                (
                    "block_size_y",
                    &[
                        32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160,
                        168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256,
                    ],
                ),
                ("block_size_z", &[1]),
                ("tile_size_x", &[1, 2, 3, 4]),
                ("tile_size_y", &[1, 2, 3, 4, 5, 6, 7, 8]),
                ("tile_stride_x", &[0, 1]),
                ("tile_stride_y", &[0, 1]),
                ("loop_unroll_factor_channel", &[0]),
            ],
            restrictions: &[
                "32 <= block_size_x * block_size_y <= 1024",
                "tile_size_x > 1 or tile_stride_x == 0",
                "tile_size_y > 1 or tile_stride_y == 0",
            ],
            step: 1,
            valid: 11130,
        },
        Space {
            params: &[
                ("GEMMK", &[0]),
                ("MWG", &[16, 32, 64, 128]),
                ("NWG", &[16, 32, 64, 128]),
                ("KWG", &[16, 32]),
                ("MDIMC", &[8, 16, 32]),
                ("NDIMC", &[8, 16, 32]),
                ("MDIMA", &[8, 16, 32]),
                ("NDIMB", &[8, 16, 32]),
                ("KWI", &[2]),
                ("VWM", &[1, 2, 4, 8]),
                ("VWN", &[1, 2, 4, 8]),
                ("STRM", &[0, 1]),
                ("STRN", &[0, 1]),
                ("SA", &[0, 1]),
                ("SB", &[0, 1]),
                ("KREG", &[1]),
                ("PRECISION", &[32]),
            ],
            restrictions: &[
                "KWG % KWI == 0",
                "MWG % (MDIMC * VWM) == 0",
                "NWG % (NDIMC * VWN) == 0",
                "MWG % (MDIMA * VWM) == 0",
                "NWG % (NDIMB * VWN) == 0",
                "KWG % ((MDIMC * NDIMC)/MDIMA) == 0",
                "KWG % ((MDIMC * NDIMC)/NDIMB) == 0",
                "not (MWG == 128 and NWG == 128 and MDIMC == 8 and NDIMC == 8)",
            ],
            step: 1,
            valid: 116928,
        },
        Space {
            params: &[
                ("grid_width", &[4096]),
                ("grid_height", &[4096]),
                (
                    "block_size_x",
                    &[
                        1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384,
                        416, 448, 480, 512, 544, 576, 608, 640, 672, 704, 736, 768, 800, 832, 864,
                        896, 928, 960, 992, 1024,
                    ],
                ),
                ("block_size_y", &[1, 2, 4, 8, 16, 32]),
                ("tile_size_x", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
                ("tile_size_y", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
                ("temporal_tiling_factor", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
                ("max_tfactor", &[10]),
                ("loop_unroll_factor_t", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]),
                ("sh_power", &[0, 1]),
            ],
            restrictions: &[
                "block_size_x*block_size_y>= 32",
                "temporal_tiling_factor % loop_unroll_factor_t == 0",
                "block_size_x*block_size_y <= 1024",
                "(block_size_x*tile_size_x+ temporal_tiling_factor * 2) * (block_size_y*tile_size_y+ temporal_tiling_factor * 2) * (2+sh_power) * 4 <= 49152",
            ],
            step: 101,
            valid: 829,
        },
    ];
    for space in spaces {
        let names: Vec<&str> = space.params.iter().map(|(n, _)| *n).collect();
        let compiled: Vec<_> = space
            .restrictions
            .iter()
            .map(|r| Expr::parse(r).unwrap().bind(&names).unwrap())
            .collect();
        let sizes: Vec<usize> = space.params.iter().map(|(_, v)| v.len()).collect();
        let total: usize = sizes.iter().product();
        let mut values = vec![Value::Int(0); names.len()];
        let mut valid = 0;
        for index in (0..total).step_by(space.step) {
            // itertools.product order: the last parameter varies fastest.
            let mut rest = index;
            for (d, (_, choices)) in space.params.iter().enumerate().rev() {
                values[d] = Value::Int(choices[rest % sizes[d]]);
                rest /= sizes[d];
            }
            if compiled.iter().all(|c| c.eval_bool(&values).unwrap()) {
                valid += 1;
            }
        }
        assert_eq!(valid, space.valid, "{:?}", space.restrictions);
    }
}

/// Evaluation speed: `cargo test --release -p tunebox-expr -- --ignored --nocapture`.
#[test]
#[ignore = "a timing to read, not a check"]
fn one_million_evaluations() {
    let c = Expr::parse("32 <= block_size_x * block_size_y <= 1024")
        .unwrap()
        .bind(&["block_size_x", "block_size_y"])
        .unwrap();
    let gemm = Expr::parse("KWG % ((MDIMC * NDIMC)/MDIMA) == 0")
        .unwrap()
        .bind(&["KWG", "MDIMC", "NDIMC", "MDIMA"])
        .unwrap();
    let start = std::time::Instant::now();
    let mut kept = 0usize;
    for i in 0..1_000_000i64 {
        let values = [Value::Int(1 + i % 64), Value::Int(1 + (i / 64) % 64)];
        kept += usize::from(c.eval_bool(std::hint::black_box(&values)).unwrap());
    }
    let dedispersion = start.elapsed();
    let start = std::time::Instant::now();
    for i in 0..1_000_000i64 {
        let values = [
            Value::Int(16 << (i % 2)),
            Value::Int(8 << (i % 3)),
            Value::Int(8 << (i % 5 % 3)),
            Value::Int(8 << (i % 7 % 3)),
        ];
        kept += usize::from(gemm.eval_bool(std::hint::black_box(&values)).unwrap());
    }
    let gemm_time = start.elapsed();
    println!("1e6 evaluations: dedispersion {dedispersion:?}, GEMM {gemm_time:?} ({kept} kept)");
}

proptest! {
    /// `//` and `%` agree with each other as Python defines them, for any ints.
    #[test]
    fn floor_division_identity(a in -1000i64..1000, b in -50i64..50) {
        prop_assume!(b != 0);
        let vars = [("a", Value::Int(a)), ("b", Value::Int(b))];
        prop_assert_eq!(eval("(a // b) * b + a % b == a", &vars).unwrap(), "True");
        prop_assert_eq!(eval("a % b == 0 or (a % b < 0) == (b < 0)", &vars).unwrap(), "True");
        prop_assert_eq!(eval("a // b == math.floor(a / b)", &vars).unwrap(), "True");
    }

    /// A chained comparison is the `and` of its links.
    #[test]
    fn chains_are_conjunctions(x in -5i64..5, y in -5.0f64..5.0, z in -5i64..5) {
        let vars = [("x", Value::Int(x)), ("y", Value::Float(y)), ("z", Value::Int(z))];
        prop_assert_eq!(
            eval("x < y <= z != x", &vars).unwrap(),
            eval("x < y and y <= z and z != x", &vars).unwrap()
        );
    }

    /// Any text either parses or is a parse error, and whatever parses evaluates to a value or
    /// an error: never a panic.
    #[test]
    fn never_panics(text in "[abx0-9 .()\\[\\],+*/%<>=!&|^~-]{0,24}|[a-z0-9 ()+*/%<>=.]{0,30}") {
        if let Ok(expr) = Expr::parse(&text) {
            let names: Vec<String> = expr.variables().to_vec();
            let c = expr.bind(&names).unwrap();
            let values: Vec<Value<'_>> = (0..names.len()).map(|i| if i % 2 == 0 { Value::Int(i as i64 - 1) } else { Value::Float(0.5) }).collect();
            let _ = c.eval(&values);
        }
    }
}
