//! Tokens and a recursive-descent parser for the expression subset of Python's grammar, with
//! Python's precedence (lowest first): `x if c else y`, `or`, `and`, `not`, comparisons
//! (chained), `|`, `^`, `&`, `<<` `>>`, `+` `-`, `*` `/` `//` `%`, unary `-` `+` `~`, `**`,
//! subscripts, calls and `math.` attributes; list displays, tuples and comprehensions.

use crate::builtins::{BUILTINS, Func, MATH, MATH_CONSTANTS};
use crate::error::ExprError;
use crate::ops::{BinOp, CmpOp, UnOp};

/// A byte range of the expression's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) start: u32,
    pub(crate) end: u32,
}

impl Span {
    fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    fn to(self, other: Span) -> Span {
        Span {
            start: self.start,
            end: other.end,
        }
    }
}

/// A node of the syntax tree, with the text it came from.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    pub(crate) span: Span,
}

/// One link of a comparison chain: `op right`, and the span of `left op right`.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub(crate) op: CmpOp,
    pub(crate) right: Node,
    pub(crate) span: Span,
}

#[derive(Debug, Clone)]
pub(crate) enum Kind {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(Box<str>),
    /// A variable: its index in the expression's variables, or after binding its slot.
    Var(usize),
    Unary(UnOp, Box<Node>),
    Not(Box<Node>),
    Binary(BinOp, Box<Node>, Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
    Compare(Box<Node>, Box<[Link]>),
    /// `then if cond else other`.
    IfElse {
        then: Box<Node>,
        cond: Box<Node>,
        other: Box<Node>,
    },
    /// A list or tuple literal: in a restriction or metric only after `in`/`not in`, or as
    /// `min`/`max`'s one argument; anywhere in [`crate::eval`].
    Seq(Box<[Node]>),
    Call(Func, Box<[Node]>),
    /// `[elt for var in iter if cond …]`, one or more `for` clauses: only in [`crate::eval`].
    Comp {
        elt: Box<Node>,
        clauses: Box<[Clause]>,
    },
    /// `seq[index]`: only in [`crate::eval`].
    Index(Box<Node>, Box<Node>),
}

/// One `for var in iter if cond …` clause of a comprehension.
#[derive(Debug, Clone)]
pub(crate) struct Clause {
    /// The loop variable: its index in the expression's variables.
    pub(crate) var: usize,
    pub(crate) iter: Node,
    pub(crate) conds: Box<[Node]>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    Name(String),
    Op(&'static str),
    End,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    span: Span,
}

/// Python's keywords that cannot be names.
const KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// Operators, longest first.
const OPS: [&str; 27] = [
    "**", "//", "<<", ">>", "<=", ">=", "==", "!=", "+", "-", "*", "/", "%", "&", "|", "^", "~",
    "<", ">", "(", ")", "[", "]", ",", ".", "=", "@",
];

/// The result of parsing: the tree and the variables in first-use order.
pub(crate) struct Parsed {
    pub(crate) root: Node,
    pub(crate) variables: Vec<String>,
}

/// Parses a restriction or metric: lists only where [`check_seqs`] allows them, no
/// comprehension, subscript or list-building function.
pub(crate) fn parse(text: &str) -> Result<Parsed, ExprError> {
    let parsed = parse_objects(text)?;
    check_seqs(text, &parsed.root, false)?;
    Ok(parsed)
}

/// Parses an expression of lists as well as scalars (for [`crate::eval`]).
pub(crate) fn parse_objects(text: &str) -> Result<Parsed, ExprError> {
    let tokens = lex(text)?;
    let mut parser = Parser {
        text,
        tokens,
        pos: 0,
        variables: Vec::new(),
    };
    let root = parser.expr()?;
    if parser.peek() != &Tok::End {
        let expected = "an operator, or the end of the expression";
        return Err(parser.error_here(expected));
    }
    Ok(Parsed {
        root,
        variables: parser.variables,
    })
}

fn parse_error(text: &str, at: usize, found: String, expected: &str) -> ExprError {
    ExprError::Parse {
        text: text.to_owned(),
        column: text[..at.min(text.len())].chars().count() + 1,
        found,
        expected: expected.to_owned(),
    }
}

fn lex(text: &str) -> Result<Vec<Token>, ExprError> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() || c == b'\\' && bytes.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        let start = i;
        let tok = if c.is_ascii_digit()
            || c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
        {
            let (tok, end) = lex_number(text, i)?;
            i = end;
            tok
        } else if c == b'\'' || c == b'"' {
            let (s, end) = lex_string(text, i)?;
            i = end;
            Tok::Str(s)
        } else if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 {
            let rest = &text[i..];
            let len = rest
                .char_indices()
                .find(|(_, ch)| !(ch.is_alphanumeric() || *ch == '_'))
                .map_or(rest.len(), |(k, _)| k);
            if len == 0 {
                let ch = rest.chars().next().expect("a character");
                return Err(parse_error(
                    text,
                    i,
                    format!("`{ch}`"),
                    "a value, a name, an operator or a parenthesis",
                ));
            }
            i += len;
            Tok::Name(rest[..len].to_owned())
        } else if let Some(op) = OPS.iter().find(|op| text[i..].starts_with(*op)) {
            i += op.len();
            Tok::Op(op)
        } else {
            let ch = text[i..].chars().next().expect("a character");
            let hint = if ch == '!' {
                "`!=` (Python's negation is `not`)"
            } else {
                "a value, a name, an operator or a parenthesis"
            };
            return Err(parse_error(text, i, format!("`{ch}`"), hint));
        };
        tokens.push(Token {
            tok,
            span: Span::new(start, i),
        });
    }
    tokens.push(Token {
        tok: Tok::End,
        span: Span::new(text.len(), text.len()),
    });
    Ok(tokens)
}

/// Digits with single underscores between them, in `radix`; returns the end.
fn digits_end(bytes: &[u8], mut i: usize, radix: u32) -> usize {
    while i < bytes.len() {
        let c = bytes[i];
        if (c as char).is_digit(radix)
            || c == b'_'
                && i + 1 < bytes.len()
                && (bytes[i + 1] as char).is_digit(radix)
                && i > 0
                && (bytes[i - 1] as char).is_digit(radix)
        {
            i += 1;
        } else {
            break;
        }
    }
    i
}

fn lex_number(text: &str, start: usize) -> Result<(Tok, usize), ExprError> {
    let bytes = text.as_bytes();
    let bad = |at: usize, what: &str| {
        let end = text[at..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .map_or(text.len(), |k| at + k);
        parse_error(text, start, format!("`{}`", &text[start..end]), what)
    };
    let prefix = bytes.get(start + 1).map(u8::to_ascii_lowercase);
    let (tok, end) = if bytes[start] == b'0' && matches!(prefix, Some(b'x' | b'o' | b'b')) {
        let radix = match prefix {
            Some(b'x') => 16,
            Some(b'o') => 8,
            _ => 2,
        };
        // `0x_1f` is valid: an underscore may follow the prefix.
        let mut first = start + 2;
        if bytes.get(first) == Some(&b'_') {
            first += 1;
        }
        let end = digits_end(bytes, first, radix);
        let digits: String = text[first..end].chars().filter(|c| *c != '_').collect();
        if digits.is_empty() {
            return Err(bad(start, "a number"));
        }
        let value = i64::from_str_radix(&digits, radix)
            .map_err(|_| bad(start, "an int that fits in 64 bits"))?;
        (Tok::Int(value), end)
    } else {
        let mut end = digits_end(bytes, start, 10);
        let int_end = end;
        let mut is_float = false;
        if bytes.get(end) == Some(&b'.') {
            is_float = true;
            end += 1;
            if bytes.get(end).is_some_and(u8::is_ascii_digit) {
                end = digits_end(bytes, end, 10);
            }
        }
        if matches!(bytes.get(end), Some(b'e' | b'E')) {
            let mut k = end + 1;
            if matches!(bytes.get(k), Some(b'+' | b'-')) {
                k += 1;
            }
            if bytes.get(k).is_some_and(u8::is_ascii_digit) {
                is_float = true;
                end = digits_end(bytes, k, 10);
            } else {
                return Err(bad(start, "a number (an exponent needs digits: `1e3`)"));
            }
        }
        let literal: String = text[start..end].chars().filter(|c| *c != '_').collect();
        if is_float {
            (
                Tok::Float(literal.parse().map_err(|_| bad(start, "a number"))?),
                end,
            )
        } else {
            let digits = &text[start..int_end];
            if digits.len() > 1 && digits.starts_with('0') && literal.bytes().any(|c| c != b'0') {
                return Err(bad(
                    start,
                    "a number without leading zeros (Python writes octal as `0o17`)",
                ));
            }
            let value: i64 = literal
                .parse()
                .map_err(|_| bad(start, "an int that fits in 64 bits"))?;
            (Tok::Int(value), end)
        }
    };
    if let Some(&c) = bytes.get(end) {
        if c == b'j' || c == b'J' {
            return Err(bad(
                start,
                "a real number (complex numbers are not supported)",
            ));
        }
        if c.is_ascii_alphanumeric() || c == b'_' {
            return Err(bad(start, "a number followed by an operator"));
        }
    }
    Ok((tok, end))
}

fn lex_string(text: &str, start: usize) -> Result<(String, usize), ExprError> {
    let quote = text[start..].chars().next().expect("a quote");
    let mut out = String::new();
    let mut chars = text[start + 1..].char_indices();
    while let Some((k, c)) = chars.next() {
        if c == quote {
            return Ok((out, start + 1 + k + 1));
        }
        if c == '\\' {
            match chars.next() {
                Some((_, e)) => match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    '0' => out.push('\0'),
                    '\\' | '\'' | '"' => out.push(e),
                    '\n' => {}
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                },
                None => break,
            }
        } else {
            out.push(c);
        }
    }
    Err(parse_error(
        text,
        start,
        "a string that is not closed".to_owned(),
        &format!("a closing {quote}"),
    ))
}

struct Parser<'t> {
    text: &'t str,
    tokens: Vec<Token>,
    pos: usize,
    variables: Vec<String>,
}

fn describe(tok: &Tok, text: &str, span: Span) -> String {
    match tok {
        Tok::End => "the end of the expression".to_owned(),
        Tok::Str(_) => format!(
            "the string {}",
            &text[span.start as usize..span.end as usize]
        ),
        _ => format!("`{}`", &text[span.start as usize..span.end as usize]),
    }
}

impl Parser<'_> {
    fn peek(&self) -> &Tok {
        &self.tokens[self.pos].tok
    }

    fn peek_at(&self, ahead: usize) -> &Tok {
        let i = (self.pos + ahead).min(self.tokens.len() - 1);
        &self.tokens[i].tok
    }

    fn span(&self) -> Span {
        self.tokens[self.pos].span
    }

    fn bump(&mut self) -> Token {
        let t = self.tokens[self.pos].clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        t
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }

    fn is_word(&self, word: &str) -> bool {
        matches!(self.peek(), Tok::Name(n) if n == word)
    }

    fn error_here(&self, expected: &str) -> ExprError {
        let t = &self.tokens[self.pos];
        parse_error(
            self.text,
            t.span.start as usize,
            describe(&t.tok, self.text, t.span),
            expected,
        )
    }

    fn expect_op(&mut self, op: &str, expected: &str) -> Result<Span, ExprError> {
        if self.is_op(op) {
            Ok(self.bump().span)
        } else {
            Err(self.error_here(expected))
        }
    }

    /// `or_test ['if' or_test 'else' expr]`
    fn expr(&mut self) -> Result<Node, ExprError> {
        let then = self.or_test()?;
        if !self.is_word("if") {
            return Ok(then);
        }
        self.bump();
        let cond = self.or_test()?;
        if !self.is_word("else") {
            return Err(self.error_here("`else` (a conditional is `a if condition else b`)"));
        }
        self.bump();
        let other = self.expr()?;
        let span = then.span.to(other.span);
        Ok(Node {
            kind: Kind::IfElse {
                then: Box::new(then),
                cond: Box::new(cond),
                other: Box::new(other),
            },
            span,
        })
    }

    fn or_test(&mut self) -> Result<Node, ExprError> {
        let mut left = self.and_test()?;
        while self.is_word("or") {
            self.bump();
            let right = self.and_test()?;
            let span = left.span.to(right.span);
            left = Node {
                kind: Kind::Or(Box::new(left), Box::new(right)),
                span,
            };
        }
        Ok(left)
    }

    fn and_test(&mut self) -> Result<Node, ExprError> {
        let mut left = self.not_test()?;
        while self.is_word("and") {
            self.bump();
            let right = self.not_test()?;
            let span = left.span.to(right.span);
            left = Node {
                kind: Kind::And(Box::new(left), Box::new(right)),
                span,
            };
        }
        Ok(left)
    }

    fn not_test(&mut self) -> Result<Node, ExprError> {
        if self.is_word("not") {
            let start = self.bump().span;
            let operand = self.not_test()?;
            let span = start.to(operand.span);
            return Ok(Node {
                kind: Kind::Not(Box::new(operand)),
                span,
            });
        }
        self.comparison()
    }

    fn comparison_op(&self) -> Option<(CmpOp, usize)> {
        match self.peek() {
            Tok::Op("<") => Some((CmpOp::Lt, 1)),
            Tok::Op("<=") => Some((CmpOp::Le, 1)),
            Tok::Op(">") => Some((CmpOp::Gt, 1)),
            Tok::Op(">=") => Some((CmpOp::Ge, 1)),
            Tok::Op("==") => Some((CmpOp::Eq, 1)),
            Tok::Op("!=") => Some((CmpOp::Ne, 1)),
            Tok::Name(n) if n == "in" => Some((CmpOp::In, 1)),
            Tok::Name(n) if n == "not" && matches!(self.peek_at(1), Tok::Name(m) if m == "in") => {
                Some((CmpOp::NotIn, 2))
            }
            _ => None,
        }
    }

    fn comparison(&mut self) -> Result<Node, ExprError> {
        let first = self.bitor()?;
        let mut links = Vec::new();
        let mut prev = first.span;
        loop {
            if self.is_word("is") {
                return Err(self.error_here("a comparison such as `==` (`is` is not supported)"));
            }
            if self.is_op("=") {
                return Err(self.error_here("`==` to compare (`=` assigns)"));
            }
            let Some((op, len)) = self.comparison_op() else {
                break;
            };
            for _ in 0..len {
                self.bump();
            }
            let right = self.bitor()?;
            let span = prev.to(right.span);
            prev = right.span;
            links.push(Link { op, right, span });
        }
        if links.is_empty() {
            return Ok(first);
        }
        let span = first.span.to(prev);
        Ok(Node {
            kind: Kind::Compare(Box::new(first), links.into_boxed_slice()),
            span,
        })
    }

    fn binary_level(
        &mut self,
        ops: &[(&str, BinOp)],
        next: fn(&mut Self) -> Result<Node, ExprError>,
    ) -> Result<Node, ExprError> {
        let mut left = next(self)?;
        while let Some(&(_, op)) = ops.iter().find(|(sym, _)| self.is_op(sym)) {
            self.bump();
            let right = next(self)?;
            let span = left.span.to(right.span);
            left = Node {
                kind: Kind::Binary(op, Box::new(left), Box::new(right)),
                span,
            };
        }
        Ok(left)
    }

    fn bitor(&mut self) -> Result<Node, ExprError> {
        self.binary_level(&[("|", BinOp::BitOr)], Self::bitxor)
    }

    fn bitxor(&mut self) -> Result<Node, ExprError> {
        self.binary_level(&[("^", BinOp::BitXor)], Self::bitand)
    }

    fn bitand(&mut self) -> Result<Node, ExprError> {
        self.binary_level(&[("&", BinOp::BitAnd)], Self::shift)
    }

    fn shift(&mut self) -> Result<Node, ExprError> {
        self.binary_level(&[("<<", BinOp::Shl), (">>", BinOp::Shr)], Self::arith)
    }

    fn arith(&mut self) -> Result<Node, ExprError> {
        self.binary_level(&[("+", BinOp::Add), ("-", BinOp::Sub)], Self::term)
    }

    fn term(&mut self) -> Result<Node, ExprError> {
        if self.is_op("@") {
            return Err(self.error_here("a value (`@` is not supported)"));
        }
        self.binary_level(
            &[
                ("*", BinOp::Mul),
                ("/", BinOp::Div),
                ("//", BinOp::FloorDiv),
                ("%", BinOp::Mod),
            ],
            Self::factor,
        )
    }

    /// `('+'|'-'|'~') factor | power`
    fn factor(&mut self) -> Result<Node, ExprError> {
        let op = match self.peek() {
            Tok::Op("-") => UnOp::Neg,
            Tok::Op("+") => UnOp::Pos,
            Tok::Op("~") => UnOp::Invert,
            _ => return self.power(),
        };
        let start = self.bump().span;
        let operand = self.factor()?;
        let span = start.to(operand.span);
        Ok(Node {
            kind: Kind::Unary(op, Box::new(operand)),
            span,
        })
    }

    /// `subscripted ['**' factor]`: right-associative, and binds tighter than a unary operator
    /// on its left (`-2 ** 2 == -4`) but not on its right (`2 ** -1 == 0.5`).
    fn power(&mut self) -> Result<Node, ExprError> {
        let base = self.subscripted()?;
        if !self.is_op("**") {
            return Ok(base);
        }
        self.bump();
        let exponent = self.factor()?;
        let span = base.span.to(exponent.span);
        Ok(Node {
            kind: Kind::Binary(BinOp::Pow, Box::new(base), Box::new(exponent)),
            span,
        })
    }

    /// `primary ('[' expr ']')*`
    fn subscripted(&mut self) -> Result<Node, ExprError> {
        let mut node = self.primary()?;
        while self.is_op("[") {
            self.bump();
            let index = self.expr()?;
            let close = self.expect_op("]", "`]` to close the subscript")?;
            let span = node.span.to(close);
            node = Node {
                kind: Kind::Index(Box::new(node), Box::new(index)),
                span,
            };
        }
        Ok(node)
    }

    fn primary(&mut self) -> Result<Node, ExprError> {
        let token = self.tokens[self.pos].clone();
        let span = token.span;
        let kind = match token.tok {
            Tok::Int(i) => {
                self.bump();
                Kind::Int(i)
            }
            Tok::Float(f) => {
                self.bump();
                Kind::Float(f)
            }
            Tok::Str(s) => {
                self.bump();
                Kind::Str(s.into_boxed_str())
            }
            Tok::Op("(") => return self.parenthesized(),
            Tok::Op("[") => return self.list(),
            Tok::Name(name) => return self.name(name, span),
            _ => return Err(self.error_here("a value, a name or `(`")),
        };
        Ok(Node { kind, span })
    }

    /// After `(`: a parenthesized expression or a tuple.
    fn parenthesized(&mut self) -> Result<Node, ExprError> {
        let open = self.bump().span;
        if self.is_op(")") {
            let close = self.bump().span;
            return Ok(Node {
                kind: Kind::Seq(Box::new([])),
                span: open.to(close),
            });
        }
        let mut first = self.expr()?;
        if self.is_op(")") {
            // The parentheses belong to the operand, so that a message quotes `(a - b)`.
            first.span = open.to(self.bump().span);
            return Ok(first);
        }
        if !self.is_op(",") {
            return Err(self.error_here("`)` or `,`"));
        }
        self.bump();
        let mut items = vec![first];
        let (rest, close) = self.items(")")?;
        items.extend(rest);
        Ok(Node {
            kind: Kind::Seq(items.into_boxed_slice()),
            span: open.to(close),
        })
    }

    /// After `[`: a list display `[a, b, …]` or a comprehension `[elt for x in it if c …]`.
    fn list(&mut self) -> Result<Node, ExprError> {
        let open = self.bump().span;
        if self.is_op("]") {
            let close = self.bump().span;
            return Ok(Node {
                kind: Kind::Seq(Box::new([])),
                span: open.to(close),
            });
        }
        let first = self.expr()?;
        if !self.is_word("for") {
            let mut items = vec![first];
            if self.is_op(",") {
                self.bump();
            } else if !self.is_op("]") {
                return Err(self.error_here("`,`, `]` or `for`"));
            }
            let (rest, close) = self.items("]")?;
            items.extend(rest);
            return Ok(Node {
                kind: Kind::Seq(items.into_boxed_slice()),
                span: open.to(close),
            });
        }
        let mut clauses = Vec::new();
        while self.is_word("for") {
            self.bump();
            let target = self.span();
            let var = match self.peek().clone() {
                Tok::Name(name) if !KEYWORDS.contains(&name.as_str()) => {
                    self.bump();
                    self.variable(name)
                }
                _ => return Err(self.error_here("a name to bind (`for x in …`)")),
            };
            if !self.is_word("in") {
                return Err(parse_error(
                    self.text,
                    self.span().start as usize,
                    describe(self.peek(), self.text, self.span()),
                    &format!(
                        "`in` after `for {}`",
                        &self.text[target.start as usize..target.end as usize]
                    ),
                ));
            }
            self.bump();
            let iter = self.or_test()?;
            let mut conds = Vec::new();
            while self.is_word("if") {
                self.bump();
                conds.push(self.or_test()?);
            }
            clauses.push(Clause {
                var,
                iter,
                conds: conds.into_boxed_slice(),
            });
        }
        let close = self.expect_op("]", "`]`, `for` or `if`")?;
        Ok(Node {
            kind: Kind::Comp {
                elt: Box::new(first),
                clauses: clauses.into_boxed_slice(),
            },
            span: open.to(close),
        })
    }

    /// The index of variable `name`, added in first-use order.
    fn variable(&mut self, name: String) -> usize {
        match self.variables.iter().position(|v| *v == name) {
            Some(i) => i,
            None => {
                self.variables.push(name);
                self.variables.len() - 1
            }
        }
    }

    /// Comma-separated expressions up to `close` (a trailing comma allowed); returns the span
    /// of `close`.
    fn items(&mut self, close: &str) -> Result<(Vec<Node>, Span), ExprError> {
        let mut items = Vec::new();
        loop {
            if self.is_op(close) {
                return Ok((items, self.bump().span));
            }
            items.push(self.expr()?);
            if self.is_op(",") {
                self.bump();
            } else if !self.is_op(close) {
                return Err(self.error_here(&format!("`,` or `{close}`")));
            }
        }
    }

    fn name(&mut self, name: String, span: Span) -> Result<Node, ExprError> {
        match name.as_str() {
            "True" | "False" => {
                self.bump();
                return Ok(Node {
                    kind: Kind::Bool(name == "True"),
                    span,
                });
            }
            "None" => return Err(self.error_here("a value (`None` is not supported)")),
            n if KEYWORDS.contains(&n) => return Err(self.error_here("a value, a name or `(`")),
            _ => {}
        }
        self.bump();
        if name == "math" && self.is_op(".") {
            self.bump();
            let attr_span = self.span();
            let Tok::Name(attr) = self.peek().clone() else {
                return Err(self.error_here("a name after `math.`"));
            };
            if let Some((_, value)) = MATH_CONSTANTS.iter().find(|(n, _)| *n == attr) {
                self.bump();
                return Ok(Node {
                    kind: Kind::Float(*value),
                    span: span.to(attr_span),
                });
            }
            let Some((_, func)) = MATH.iter().find(|(n, _)| *n == attr) else {
                let known: Vec<String> = MATH
                    .iter()
                    .map(|(n, _)| format!("math.{n}()"))
                    .chain(MATH_CONSTANTS.iter().map(|(n, _)| format!("math.{n}")))
                    .collect();
                return Err(self.error_here(&format!("one of {}", known.join(", "))));
            };
            self.bump();
            return self.call(*func, span);
        }
        if self.is_op("(") {
            let Some((_, func)) = BUILTINS.iter().find(|(n, _)| *n == name) else {
                let known: Vec<String> = BUILTINS
                    .iter()
                    .map(|(n, _)| format!("{n}()"))
                    .chain(MATH.iter().map(|(n, _)| format!("math.{n}()")))
                    .collect();
                return Err(parse_error(
                    self.text,
                    span.start as usize,
                    format!("a call of `{name}`"),
                    &format!("a known function: {}", known.join(", ")),
                ));
            };
            return self.call(*func, span);
        }
        let index = self.variable(name);
        Ok(Node {
            kind: Kind::Var(index),
            span,
        })
    }

    /// At `(` after a function's name.
    fn call(&mut self, func: Func, start: Span) -> Result<Node, ExprError> {
        self.expect_op("(", "`(` to call the function")?;
        let (args, close) = self.items(")")?;
        let (min, max) = func.arity();
        if args.len() < min || args.len() > max {
            let expected = match (min, max) {
                (1, usize::MAX) => "at least one argument".to_owned(),
                (a, b) if a == b => format!("{a} argument{}", if a == 1 { "" } else { "s" }),
                (a, b) if b == a + 1 => format!("{a} or {b} arguments"),
                (a, b) => format!("{a} to {b} arguments"),
            };
            return Err(parse_error(
                self.text,
                start.start as usize,
                format!("{}() with {} arguments", func.name(), args.len()),
                &format!("{}() with {expected}", func.name()),
            ));
        }
        Ok(Node {
            kind: Kind::Call(func, args.into_boxed_slice()),
            span: start.to(close),
        })
    }
}

/// In a restriction or metric, lists and tuples are understood only as the last operand of
/// `in` / `not in`, and as the one argument of `min` / `max`; comprehensions, subscripts and
/// the functions that build lists (`range`, `list`, `tuple`, `len`) only in [`crate::eval`].
fn check_seqs(text: &str, node: &Node, allowed: bool) -> Result<(), ExprError> {
    let quoted = || {
        format!(
            "`{}`",
            &text[node.span.start as usize..node.span.end as usize]
        )
    };
    let lists_only = "a value (comprehensions, subscripts, range(), list(), tuple() and len() \
                      are understood in value lists, not in restrictions or metrics)";
    match &node.kind {
        Kind::Comp { .. } | Kind::Index(..) => Err(parse_error(
            text,
            node.span.start as usize,
            quoted(),
            lists_only,
        )),
        Kind::Call(func, _) if func.builds_lists() => Err(parse_error(
            text,
            node.span.start as usize,
            quoted(),
            lists_only,
        )),
        Kind::Seq(items) => {
            if !allowed {
                return Err(parse_error(
                    text,
                    node.span.start as usize,
                    format!(
                        "the list or tuple `{}`",
                        &text[node.span.start as usize..node.span.end as usize]
                    ),
                    "a value (lists and tuples are only understood after `in` or `not in`, \
                     and as the one argument of min() or max())",
                ));
            }
            items.iter().try_for_each(|n| check_seqs(text, n, false))
        }
        Kind::Int(_) | Kind::Float(_) | Kind::Bool(_) | Kind::Str(_) | Kind::Var(_) => Ok(()),
        Kind::Unary(_, a) | Kind::Not(a) => check_seqs(text, a, false),
        Kind::Binary(_, a, b) | Kind::And(a, b) | Kind::Or(a, b) => {
            check_seqs(text, a, false)?;
            check_seqs(text, b, false)
        }
        Kind::Compare(first, links) => {
            check_seqs(text, first, false)?;
            let last = links.len() - 1;
            links.iter().enumerate().try_for_each(|(i, link)| {
                let ok = i == last && matches!(link.op, CmpOp::In | CmpOp::NotIn);
                check_seqs(text, &link.right, ok)
            })
        }
        Kind::IfElse { then, cond, other } => {
            check_seqs(text, then, false)?;
            check_seqs(text, cond, false)?;
            check_seqs(text, other, false)
        }
        Kind::Call(func, args) => {
            let ok = matches!(func, Func::Min | Func::Max) && args.len() == 1;
            args.iter().try_for_each(|n| check_seqs(text, n, ok))
        }
    }
}
