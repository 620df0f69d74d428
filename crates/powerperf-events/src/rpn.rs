//! Reverse-Polish formulas as PAPI writes them: tokens separated by `|`, a trailing `|`
//! optional (PAPI user-defined events, Moore & Ralph 2011; `DERIVED_POSTFIX` in
//! `papi_events.csv`, e.g. `N0|N1|+|`).

use super::ast::{BinOp, Expr};
use super::error::{DslError, Pos};
use super::MAX_DEPTH;

/// Resolves a token that is not a number or an operator, at its place in the file: the
/// expression it names, or `(message, hint)`.
pub type NameFn<'a> = dyn Fn(&str, Pos) -> Result<Expr, (String, String)> + 'a;

/// Parse `text`. `locate` maps a char index of `text` to its place in the file; `name`
/// turns a token that is not a number or an operator into an expression (or an error
/// message with a hint).
///
/// # Errors
/// [`DslError::Syntax`] for an empty token, an operator without two operands or a formula
/// that leaves other than one value; [`DslError::TooDeep`] past [`MAX_DEPTH`].
///
/// With `skip_empty`, empty tokens are skipped as PAPI's own tokenizer does for
/// `papi_events.csv` (whose ARM sections write `|N0|N1|+|`); otherwise only a trailing
/// `|` may leave an empty token.
pub fn parse(
    text: &str,
    locate: &dyn Fn(usize) -> Pos,
    skip_empty: bool,
    name: &NameFn<'_>,
) -> Result<Expr, DslError> {
    let chars: Vec<char> = text.chars().collect();
    // Split on `|`, keeping char offsets; the token as shown in errors includes its `|`.
    let mut toks: Vec<(usize, String, String)> = Vec::new();
    let mut start = 0;
    for i in 0..=chars.len() {
        if i == chars.len() || chars[i] == '|' {
            let raw: String = chars[start..i].iter().collect();
            let lead = raw.len() - raw.trim_start().len();
            let tok = raw.trim().to_string();
            let shown: String = chars[start..(i + 1).min(chars.len())]
                .iter()
                .collect::<String>()
                .trim()
                .to_string();
            let at = start + raw[..lead].chars().count();
            if tok.is_empty() {
                // A trailing `|` is optional; any other empty token is an error.
                if i == chars.len() && !toks.is_empty() {
                    break;
                }
                if skip_empty && i < chars.len() {
                    start = i + 1;
                    continue;
                }
                return Err(DslError::syntax(
                    locate(at),
                    "empty token",
                    shown,
                    Some("two `|` in a row, or a formula that starts with `|`"),
                ));
            }
            toks.push((at, tok, shown));
            start = i + 1;
        }
    }
    let mut stack: Vec<(Expr, usize)> = Vec::new();
    for (at, tok, shown) in &toks {
        let op = match tok.as_str() {
            "+" => Some(BinOp::Add),
            "-" => Some(BinOp::Sub),
            "*" => Some(BinOp::Mul),
            "/" => Some(BinOp::Div),
            "%" => Some(BinOp::Rem),
            _ => None,
        };
        if let Some(op) = op {
            if stack.len() < 2 {
                return Err(DslError::syntax(
                    locate(*at),
                    "unexpected token",
                    shown.clone(),
                    Some(&format!(
                        "`{tok}` needs two values before it, the stack holds {}",
                        stack.len()
                    )),
                ));
            }
            let (b, db) = stack.pop().unwrap_or((Expr::Num(0.0), 0));
            let (a, da) = stack.pop().unwrap_or((Expr::Num(0.0), 0));
            let d = 1 + da.max(db);
            if d > MAX_DEPTH {
                return Err(DslError::TooDeep {
                    pos: locate(*at),
                    token: shown.clone(),
                    limit: MAX_DEPTH,
                });
            }
            stack.push((Expr::Binary(op, Box::new(a), Box::new(b)), d));
            continue;
        }
        let first = tok.chars().next().unwrap_or(' ');
        if first.is_ascii_digit() || first == '.' {
            match tok.parse::<f64>() {
                Ok(v) => {
                    stack.push((Expr::Num(v), 1));
                    continue;
                }
                Err(_)
                    if first == '.'
                        || tok.chars().all(|c| {
                            c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+')
                        }) =>
                {
                    return Err(DslError::syntax(
                        locate(*at),
                        "malformed number",
                        shown.clone(),
                        None,
                    ));
                }
                Err(_) => {}
            }
        }
        if stack.len() >= 4096 {
            return Err(DslError::TooDeep {
                pos: locate(*at),
                token: shown.clone(),
                limit: 4096,
            });
        }
        match name(tok, locate(*at)) {
            Ok(e) => stack.push((e, 1)),
            Err((msg, hint)) => {
                return Err(DslError::syntax(
                    locate(*at),
                    msg,
                    shown.clone(),
                    Some(&hint),
                ))
            }
        }
    }
    if stack.len() != 1 {
        let (at, _, shown) = toks
            .last()
            .cloned()
            .unwrap_or((0, String::new(), text.to_string()));
        return Err(DslError::syntax(
            locate(at),
            format!(
                "the formula leaves {} values on the stack after",
                stack.len()
            ),
            shown,
            Some("every operator combines the two values before it; an operator is missing"),
        ));
    }
    Ok(stack.pop().map(|p| p.0).unwrap_or(Expr::Num(f64::NAN)))
}
