//! `tunebox_expr::eval`: the value lists and sizes of the FAIR benchmark hub's T1 files, and the
//! list rules beside them. Expected values were computed with CPython 3.11 (the generated table
//! is list_cases.txt; these are the forms the hub's files use, and the errors, word for word).

use tunebox_expr::{Expr, ExprError, MAX_LEN, Object, eval};

fn ints(text: &str) -> Vec<i64> {
    match eval(text, &[]).unwrap_or_else(|e| panic!("{text}: {e}")) {
        Object::List(items) => items
            .into_iter()
            .map(|v| match v {
                Object::Int(i) => i,
                other => panic!("{text}: {other:?}"),
            })
            .collect(),
        other => panic!("{text}: {other:?}"),
    }
}

fn list(items: &[i64]) -> Object {
    Object::List(items.iter().map(|&i| Object::Int(i)).collect())
}

#[test]
fn the_hubs_value_lists() {
    assert_eq!(ints("[16, 32, 48]"), [16, 32, 48]);
    assert_eq!(ints("[2**i for i in range(0, 6)]"), [1, 2, 4, 8, 16, 32]);
    assert_eq!(
        ints("[i for i in range(1, 10+1)]"),
        (1..=10).collect::<Vec<_>>()
    );
    let hotspot = ints("[1, 2, 4, 8, 16] + list(range(32, 1024+1, 32))");
    assert_eq!(hotspot.len(), 5 + 32);
    assert_eq!(hotspot[5..8], [32, 64, 96]);
    assert_eq!(*hotspot.last().unwrap(), 1024);
}

#[test]
fn sizes_with_names_and_subscripts() {
    let names = [
        ("ProblemSize", list(&[4096, 2048])),
        ("filter_width", list(&[7, 15])),
    ];
    let size = "(ProblemSize[0]+max(filter_width)-1) * (ProblemSize[1]+max(filter_width)-1)";
    assert_eq!(
        eval(size, &names),
        Ok(Object::Int((4096 + 14) * (2048 + 14)))
    );
    assert_eq!(eval("ProblemSize[-1]", &names), Ok(Object::Int(2048)));
    assert_eq!(eval("len(ProblemSize)", &names), Ok(Object::Int(2)));
    let err = eval("ProblemSize[2]", &names).unwrap_err();
    assert_eq!(err.python_exception(), Some("IndexError"));
    assert_eq!(
        err.to_string(),
        "`ProblemSize[2]`: index out of range in `ProblemSize[2]`"
    );
    let err = eval("ProblemSize[0][0]", &names).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`ProblemSize[0][0]`: 'int' object is not subscriptable in `ProblemSize[0][0]`"
    );
    assert!(matches!(
        eval("Nope[0]", &names),
        Err(ExprError::UnknownName { name, .. }) if name == "Nope"
    ));
}

#[test]
fn python_semantics() {
    assert_eq!(
        ints("[-7 // 2, -7 % 2, 7 % -2, -2**2, 2**3**2]"),
        [-4, 1, -1, -4, 512]
    );
    assert_eq!(ints("list(range(10, 0, -3))"), [10, 7, 4, 1]);
    assert_eq!(ints("[x for x in range(10) if x % 3 == 0 if x]"), [3, 6, 9]);
    assert_eq!(
        ints("[i * j for i in range(1, 3) for j in range(i)]"),
        [0, 0, 2]
    );
    assert_eq!(ints("[1, 2] * 2"), [1, 2, 1, 2]);
    assert_eq!(ints("2 * [0]"), [0, 0]);
    assert_eq!(
        ints("[max(1, 5), min([4, 3]), abs(-2), int(2.9), ceil_div(7, 2)]"),
        [5, 3, 2, 2, 4]
    );
    assert_eq!(
        eval(
            "[0.5, 'a', \"b\", True, 1 < 2 <= 2, 7 / 2, (), (1, 2)]",
            &[]
        )
        .unwrap()
        .to_string(),
        "[0.5, 'a', 'b', True, True, 3.5, [], [1, 2]]"
    );
    assert_eq!(eval("'ab' + 'c'", &[]), Ok(Object::Str("abc".into())));
    assert_eq!(eval("[1, 2] == [1.0, 2]", &[]), Ok(Object::Bool(true)));
    assert_eq!(eval("[1, 2] < [1, 3]", &[]), Ok(Object::Bool(true)));
    assert_eq!(eval("3 in [1, 2, 3]", &[]), Ok(Object::Bool(true)));
    // A loop variable does not outlive its comprehension (Python 3).
    assert!(matches!(
        eval("[i for i in range(3)] + [i]", &[]),
        Err(ExprError::UnknownName { .. })
    ));
}

#[test]
fn errors_say_what() {
    let message = |text: &str| eval(text, &[]).unwrap_err().to_string();
    assert_eq!(
        message("[1, 2"),
        "cannot parse `[1, 2`: at column 6, expected `,` or `]`, found the end of the expression"
    );
    assert_eq!(
        message("[x for x range(3)]"),
        "cannot parse `[x for x range(3)]`: at column 10, expected `in` after `for x`, found \
         `range`"
    );
    assert!(message(&format!("range({})", MAX_LEN + 1)).contains("a list of more than 10000000"));
    assert!(message("2**70").contains("integer overflow"));
    assert!(message("np.arange(3)").contains("cannot parse"));
    assert_eq!(
        message("[1] + 2"),
        "`[1] + 2`: unsupported operand type(s) for +: 'list' and 'int' in `[1] + 2`"
    );
    assert_eq!(
        message("1 // 0"),
        "`1 // 0`: integer division or modulo by zero in `1 // 0`"
    );
    assert_eq!(
        message("range(1, 2, 0)"),
        "`range(1, 2, 0)`: range() arg 3 must not be zero in `range(1, 2, 0)`"
    );
}

#[test]
fn a_restriction_still_takes_no_list_building() {
    for text in [
        "x in [i for i in range(4)]",
        "p[0] > 1",
        "x in range(4)",
        "len(p) == 2",
    ] {
        let err = Expr::parse(text).unwrap_err().to_string();
        assert!(
            err.contains("understood in value lists, not in restrictions or metrics"),
            "{text}: {err}"
        );
    }
    // What a restriction always could: a list literal after `in`, and min/max of one.
    assert!(Expr::parse("x in [1, 2] and max([x, 3]) > 2").is_ok());
}
