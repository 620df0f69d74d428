//! One parser per file format; each produces [`Parsed`] definitions for the one compiler.

use std::collections::{BTreeMap, HashMap};

use super::ast::{BinOp, Expr};
use super::error::{DslError, Pos};
use super::infix::{self, Dialect};
use super::{rpn, LoadOptions, Parsed, RawDef};

fn pos(file: &str, line: usize, col: usize) -> Pos {
    Pos {
        file: file.to_string(),
        line,
        col,
    }
}

/// Char column (1-based) of byte offset `b` in `line`.
fn col_of(line: &str, b: usize) -> usize {
    line[..b].chars().count() + 1
}

fn check_name(name: &str, file: &str, line: usize, col: usize) -> Result<(), DslError> {
    if name.is_empty() {
        return Err(DslError::syntax(
            pos(file, line, col),
            "missing definition name before",
            ",",
            Some("write `Name, formula`"),
        ));
    }
    if let Some((k, c)) = name
        .char_indices()
        .find(|(_, c)| c.is_whitespace() || matches!(c, '|' | '(' | ')' | '*' | '/' | '+'))
    {
        return Err(DslError::syntax(
            pos(file, line, col + name[..k].chars().count()),
            "a definition name cannot contain",
            c.to_string(),
            None,
        ));
    }
    Ok(())
}

fn push_def(
    defs: &mut Vec<RawDef>,
    seen: &mut HashMap<String, usize>,
    d: RawDef,
    replace: bool,
    notes: &mut Vec<String>,
) -> Result<(), DslError> {
    if let Some(&k) = seen.get(&d.name) {
        if !replace {
            return Err(DslError::Duplicate {
                pos: d.pos.clone(),
                name: d.name.clone(),
                first_line: defs[k].pos.line,
            });
        }
        notes.push(format!(
            "{}: `{}` redefined; the definition at line {} replaces the one at line {}",
            d.pos.file, d.name, d.pos.line, defs[k].pos.line
        ));
        defs[k] = d;
        return Ok(());
    }
    seen.insert(d.name.clone(), defs.len());
    defs.push(d);
    Ok(())
}

/// PAPI user-defined events (Moore & Ralph, ICCS 2011): `#define NAME value` constants and
/// `Name, tok|tok|op|…` lines; other lines starting with `#` are comments.
pub(crate) fn papi_user(text: &str, file: &str) -> Result<Parsed, DslError> {
    let mut p = Parsed::default();
    let mut seen = HashMap::new();
    for (ln, line) in text.lines().enumerate() {
        let ln = ln + 1;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(rest) = t.strip_prefix("#define") {
            let lead = line.len() - line.trim_start().len() + "#define".len();
            let mut it = rest.split_whitespace();
            let (Some(name), Some(val)) = (it.next(), it.next()) else {
                return Err(DslError::syntax(
                    pos(file, ln, col_of(line, lead)),
                    "expected `#define NAME value`, found",
                    t,
                    None,
                ));
            };
            let vcol = col_of(line, line.rfind(val).unwrap_or(lead));
            let v: f64 = val.parse().map_err(|_| {
                DslError::syntax(
                    pos(file, ln, vcol),
                    "a #define value must be a number, found",
                    val,
                    None,
                )
            })?;
            if let Some(extra) = it.next() {
                let c = col_of(line, line.rfind(extra).unwrap_or(lead));
                return Err(DslError::syntax(
                    pos(file, ln, c),
                    "unexpected token",
                    extra,
                    Some("`#define NAME value` takes one number"),
                ));
            }
            p.constants.insert(name.to_string(), v);
            continue;
        }
        if t.starts_with('#') {
            continue;
        }
        let Some(comma) = line.find(',') else {
            let c = col_of(line, line.len() - line.trim_start().len());
            return Err(DslError::syntax(
                pos(file, ln, c),
                "expected `Name, RPN formula`, found",
                t,
                Some("user events are `Name, tok|tok|op|`"),
            ));
        };
        let name = line[..comma].trim();
        let ncol = col_of(line, line.len() - line.trim_start().len());
        check_name(name, file, ln, ncol)?;
        let body = &line[comma + 1..];
        let col0 = col_of(line, comma + 1);
        let locate = infix::at_line(file, ln, col0);
        let expr = rpn::parse(body, &locate, false, &|tok, pos| {
            Ok(Expr::Var {
                name: tok.to_string(),
                pos,
            })
        })?;
        let d = RawDef {
            name: name.to_string(),
            group: None,
            pos: pos(file, ln, ncol),
            source: body.trim().to_string(),
            expr,
            description: None,
            unit: None,
        };
        push_def(&mut p.defs, &mut seen, d, false, &mut p.notes)?;
    }
    Ok(p)
}

/// Split a CSV line on commas outside double or single quotes; (char column, field).
fn split_fields(line: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0usize;
    let mut quote: Option<char> = None;
    for (i, c) in line.chars().enumerate() {
        match quote {
            Some(q) if c == q => {
                quote = None;
                cur.push(c)
            }
            Some(_) => cur.push(c),
            None if (c == '"' || c == '\'') && cur.trim().is_empty() => {
                quote = Some(c);
                cur.push(c)
            }
            None if c == ',' => {
                out.push((start, std::mem::take(&mut cur)));
                start = i + 1;
            }
            None => cur.push(c),
        }
    }
    out.push((start, cur));
    // Column of the first non-blank char of each field, 1-based.
    out.into_iter()
        .map(|(s, f)| {
            let lead = f.chars().take_while(|c| c.is_whitespace()).count();
            (s + lead + 1, f.trim().to_string())
        })
        .collect()
}

struct Section {
    names: Vec<String>,
    notes: Vec<String>,
    defs: Vec<RawDef>,
    seen: HashMap<String, usize>,
}

/// Name of the variable PAPI's `#` stands for in a `DERIVED_POSTFIX` formula: the CPU's
/// maximum frequency in Hz.
pub const CPU_MAX_HZ: &str = "#cpu_max_hz";

/// PAPI `papi_events.csv` (icl-utk-edu/papi `src/papi_events.csv`; meaning of each derived
/// type from `papi_internal.c`'s `handle_derived_*`).
pub(crate) fn papi_csv(text: &str, file: &str, opts: &LoadOptions) -> Result<Parsed, DslError> {
    let mut sections: Vec<Section> = Vec::new();
    let mut last_was_cpu = false;
    for (ln, line) in text.lines().enumerate() {
        let ln = ln + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let fields = split_fields(line);
        let kind = fields[0].1.as_str();
        match kind {
            "CPU" | "cuda" => {
                cpu_line(&mut sections, last_was_cpu, &fields, file, ln)?;
                last_was_cpu = true;
                continue;
            }
            "PRESET" | "EVENT" => {}
            _ => {
                return Err(DslError::syntax(
                    pos(file, ln, fields[0].0),
                    "unknown line kind",
                    kind,
                    Some("lines start with CPU, PRESET or EVENT (or # for a comment)"),
                ));
            }
        }
        last_was_cpu = false;
        let Some(section) = sections.last_mut() else {
            return Err(DslError::syntax(
                pos(file, ln, fields[0].0),
                "a preset before any CPU line:",
                kind,
                Some("start the section with `CPU,<pmu name>`"),
            ));
        };
        let group = section.names.first().cloned();
        let d = preset_line(&fields, file, ln, group)?;
        push_def(
            &mut section.defs,
            &mut section.seen,
            d,
            true,
            &mut section.notes,
        )?;
    }
    select_sections(sections, file, opts)
}

/// A `CPU,<name>` (or `cuda,<name>`) line: a name of the current section, or the first of a
/// new one after presets.
fn cpu_line(
    sections: &mut Vec<Section>,
    last_was_cpu: bool,
    fields: &[(usize, String)],
    file: &str,
    ln: usize,
) -> Result<(), DslError> {
    let kind = fields[0].1.as_str();
    let name = fields.get(1).map(|f| f.1.clone()).unwrap_or_default();
    if name.is_empty() {
        return Err(DslError::syntax(
            pos(file, ln, fields[0].0),
            "a CPU line needs a name after",
            kind,
            None,
        ));
    }
    if !last_was_cpu {
        sections.push(Section {
            names: Vec::new(),
            notes: Vec::new(),
            defs: Vec::new(),
            seen: HashMap::new(),
        });
    }
    if let Some(s) = sections.last_mut() {
        s.names.push(if kind == "cuda" {
            format!("cuda:{name}")
        } else {
            name
        })
    }
    Ok(())
}

/// A `PRESET` or `EVENT` line: the preset's definition, in `group` (its section's first
/// name).
fn preset_line(
    fields: &[(usize, String)],
    file: &str,
    ln: usize,
    group: Option<String>,
) -> Result<RawDef, DslError> {
    let field = |k: usize, what: &str| -> Result<(usize, String), DslError> {
        fields
            .get(k)
            .cloned()
            .filter(|f| !f.1.is_empty())
            .ok_or_else(|| {
                let c = fields
                    .last()
                    .map(|f| f.0 + f.1.chars().count())
                    .unwrap_or(1);
                DslError::syntax(
                    pos(file, ln, c),
                    format!("missing {what} after"),
                    fields.last().map(|f| f.1.clone()).unwrap_or_default(),
                    None,
                )
            })
    };
    let (ncol, name) = field(1, "the preset name")?;
    let (dcol, dtype) = field(2, "the derived type (NOT_DERIVED, DERIVED_ADD, …)")?;
    let is_desc = |s: &str| matches!(s, "NOTE" | "LDESC" | "SDESC");
    let mut k = 3;
    let mut formula: Option<(usize, String)> = None;
    if dtype == "DERIVED_POSTFIX" || dtype == "DERIVED_INFIX" {
        formula = Some(field(3, "the formula")?);
        k = 4;
    }
    let mut natives: Vec<(usize, String)> = Vec::new();
    let mut description = None;
    while k < fields.len() {
        if is_desc(&fields[k].1) {
            description = fields
                .get(k + 1)
                .map(|f| f.1.trim_matches(|c| c == '"' || c == '\'').to_string());
            break;
        }
        if !fields[k].1.is_empty() {
            natives.push(fields[k].clone());
        }
        k += 1;
    }
    if natives.is_empty() {
        let c = fields
            .last()
            .map(|f| f.0 + f.1.chars().count())
            .unwrap_or(1);
        return Err(DslError::syntax(
            pos(file, ln, c),
            "missing native events after",
            dtype.clone(),
            None,
        ));
    }
    if natives.len() > super::MAX_DEPTH {
        let (c, n) = natives[super::MAX_DEPTH].clone();
        return Err(DslError::TooDeep {
            pos: pos(file, ln, c),
            token: n,
            limit: super::MAX_DEPTH,
        });
    }
    let (expr, source) = derived(file, ln, dcol, &dtype, formula, &natives)?;
    Ok(RawDef {
        name,
        group,
        pos: pos(file, ln, ncol),
        source,
        expr,
        description,
        unit: None,
    })
}

/// The expression (and its source text) of derived type `dtype` over `natives`, with the
/// formula of `DERIVED_POSTFIX` and `DERIVED_INFIX`; `dcol`: the type's column.
fn derived(
    file: &str,
    ln: usize,
    dcol: usize,
    dtype: &str,
    formula: Option<(usize, String)>,
    natives: &[(usize, String)],
) -> Result<(Expr, String), DslError> {
    let var = |i: usize| Expr::Var {
        name: natives[i].1.clone(),
        pos: pos(file, ln, natives[i].0),
    };
    let fold = |op: BinOp, from: usize| -> Expr {
        let mut e = var(from);
        for i in from + 1..natives.len() {
            e = Expr::Binary(op, Box::new(e), Box::new(var(i)));
        }
        e
    };
    let hz = || Expr::Var {
        name: CPU_MAX_HZ.to_string(),
        pos: pos(file, ln, dcol),
    };
    let need = |n: usize| -> Result<(), DslError> {
        if natives.len() < n {
            return Err(DslError::syntax(
                pos(file, ln, dcol),
                format!("needs at least {n} native events:"),
                dtype,
                None,
            ));
        }
        Ok(())
    };
    let (expr, source) = match dtype {
        "NOT_DERIVED" => (var(0), natives[0].1.clone()),
        "DERIVED_ADD" => (fold(BinOp::Add, 0), natives.iter().map(|n| n.1.as_str()).collect::<Vec<_>>().join(" + ")),
        "DERIVED_SUB" => (fold(BinOp::Sub, 0), natives.iter().map(|n| n.1.as_str()).collect::<Vec<_>>().join(" - ")),
        // units_per_second(N1, N0): N1 · cpu_max_hz / N0 (N0 counts cycles).
        "DERIVED_PS" => {
            need(2)?;
            let e = Expr::Binary(BinOp::Div, Box::new(Expr::Binary(BinOp::Mul, Box::new(var(1)), Box::new(hz()))), Box::new(var(0)));
            (e, format!("{} * {CPU_MAX_HZ} / {}", natives[1].1, natives[0].1))
        }
        "DERIVED_ADD_PS" => {
            need(2)?;
            let e = Expr::Binary(BinOp::Div, Box::new(Expr::Binary(BinOp::Mul, Box::new(fold(BinOp::Add, 1)), Box::new(hz()))), Box::new(var(0)));
            (e, format!("({}) * {CPU_MAX_HZ} / {}", natives[1..].iter().map(|n| n.1.as_str()).collect::<Vec<_>>().join(" + "), natives[0].1))
        }
        // PAPI returns the first term's count for compound (tagged) events.
        "DERIVED_CMPD" => (var(0), natives[0].1.clone()),
        "DERIVED_POSTFIX" => {
            let (fcol, f) = formula.unwrap_or_default();
            let locate = infix::at_line(file, ln, fcol);
            let e = rpn::parse(&f, &locate, true, &|tok, p| native_ref(tok, p, natives))?;
            (e, f)
        }
        "DERIVED_INFIX" => {
            let (fcol, f) = formula.unwrap_or_default();
            (infix_formula(file, ln, fcol, &f, natives)?, f)
        }
        other => {
            return Err(DslError::syntax(
                pos(file, ln, dcol),
                "unknown derived type",
                other,
                Some("NOT_DERIVED, DERIVED_ADD, DERIVED_SUB, DERIVED_PS, DERIVED_ADD_PS, DERIVED_CMPD, DERIVED_POSTFIX or DERIVED_INFIX"),
            ))
        }
    };
    Ok((expr, source))
}

/// A `DERIVED_INFIX` formula (at column `fcol`): `N<i>` names the i-th native event, `#`
/// the CPU's maximum frequency.
fn infix_formula(
    file: &str,
    ln: usize,
    fcol: usize,
    f: &str,
    natives: &[(usize, String)],
) -> Result<Expr, DslError> {
    let locate = infix::at_line(file, ln, fcol);
    let f2 = f.replace('#', "cpu_max_hz_");
    let mut e = infix::parse(&f2, Dialect::Plain, &locate)?;
    let mut bad: Option<String> = None;
    let mut names = Vec::new();
    e.names(&mut names);
    for n in &names {
        if n.starts_with('N') && n[1..].parse::<usize>().is_ok_and(|i| i >= natives.len()) {
            bad = Some(n.clone());
        }
    }
    if let Some(b) = bad {
        return Err(DslError::syntax(
            pos(file, ln, fcol),
            "refers to a native event that is not listed:",
            b,
            None,
        ));
    }
    let nat: Vec<String> = natives.iter().map(|n| n.1.clone()).collect();
    e.rename(&|n: &str| {
        if n == "cpu_max_hz_" {
            return Some(CPU_MAX_HZ.to_string());
        }
        n.strip_prefix('N')
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| nat.get(i).cloned())
    });
    Ok(e)
}

/// The definitions of the section named `opts.cpu` (an error if there is none), or with
/// no CPU given those of every section, each name prefixed with its section's first name.
fn select_sections(
    sections: Vec<Section>,
    file: &str,
    opts: &LoadOptions,
) -> Result<Parsed, DslError> {
    let mut p = Parsed::default();
    let mut available: Vec<String> = Vec::new();
    for s in &sections {
        for n in &s.names {
            if !available.contains(n) {
                available.push(n.clone())
            }
        }
    }
    match &opts.cpu {
        Some(cpu) => {
            let mut found = false;
            let mut seen = HashMap::new();
            for s in sections
                .into_iter()
                .filter(|s| s.names.iter().any(|n| n.eq_ignore_ascii_case(cpu)))
            {
                found = true;
                p.notes.extend(s.notes);
                for d in s.defs {
                    push_def(&mut p.defs, &mut seen, d, true, &mut p.notes)?;
                }
            }
            if !found {
                return Err(DslError::NoSection {
                    file: file.into(),
                    cpu: cpu.clone(),
                    available: available.join(", "),
                });
            }
        }
        None => {
            let mut seen = HashMap::new();
            for s in sections {
                let sec = s.names.first().cloned().unwrap_or_default();
                p.notes.extend(s.notes);
                for mut d in s.defs {
                    d.name = format!("{sec}/{}", d.name);
                    push_def(&mut p.defs, &mut seen, d, true, &mut p.notes)?;
                }
            }
        }
    }
    Ok(p)
}

fn native_ref(tok: &str, p: Pos, natives: &[(usize, String)]) -> Result<Expr, (String, String)> {
    if tok == "#" {
        return Ok(Expr::Var {
            name: CPU_MAX_HZ.to_string(),
            pos: p,
        });
    }
    if let Some(i) = tok.strip_prefix('N').and_then(|i| i.parse::<usize>().ok()) {
        return match natives.get(i) {
            Some(n) => Ok(Expr::Var {
                name: n.1.clone(),
                pos: p,
            }),
            None => Err((
                "refers to a native event that is not listed:".into(),
                format!(
                    "the line lists {} native events, N0..N{}",
                    natives.len(),
                    natives.len().saturating_sub(1)
                ),
            )),
        };
    }
    Err((
        "unexpected token".into(),
        "DERIVED_POSTFIX tokens are N<i>, numbers, `#` and + - * /".into(),
    ))
}

/// Find the `=` that separates `Name = formula` (not part of `==`, `<=`, `>=`, `!=`).
fn assign_at(line: &str) -> Option<usize> {
    let b = line.as_bytes();
    for i in 0..b.len() {
        if b[i] == b'=' {
            let prev = if i > 0 { b[i - 1] } else { b' ' };
            let next = b.get(i + 1).copied().unwrap_or(b' ');
            if next != b'=' && !matches!(prev, b'=' | b'<' | b'>' | b'!') {
                return Some(i);
            }
        }
    }
    None
}

/// Infix files: `Name = formula` lines (PerfExpert `lcpi.properties` and `machine.properties`
/// are of this form, with dotted names), or bare formulas, each named by its own text.
/// `#` starts a comment line. PerfExpert's `version = …` line is metadata, not a definition.
pub(crate) fn infix_lines(text: &str, file: &str, perfexpert: bool) -> Result<Parsed, DslError> {
    let mut p = Parsed::default();
    let mut seen = HashMap::new();
    for (ln, line) in text.lines().enumerate() {
        let ln = ln + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with("//") {
            continue;
        }
        let lead = line.len() - line.trim_start().len();
        let (name, body_at) = match assign_at(line) {
            Some(eq) => {
                let name = line[..eq].trim();
                check_name(name, file, ln, col_of(line, lead))?;
                (name.to_string(), eq + 1)
            }
            None => (t.to_string(), lead),
        };
        if perfexpert && name == "version" {
            continue;
        }
        let body = &line[body_at..];
        let locate = infix::at_line(file, ln, col_of(line, body_at));
        let expr = infix::parse(body, Dialect::Plain, &locate)?;
        let d = RawDef {
            name,
            group: None,
            pos: pos(file, ln, col_of(line, lead)),
            source: body.trim().to_string(),
            expr,
            description: None,
            unit: None,
        };
        push_def(&mut p.defs, &mut seen, d, false, &mut p.notes)?;
    }
    Ok(p)
}

/// LIKWID performance groups (RRZE-HPC/likwid `groups/<arch>/<GROUP>.txt`): `SHORT text`,
/// `EVENTSET` lines `REGISTER EVENT`, `METRICS` lines `Name [unit] formula` whose formula is
/// the last blank-separated word (as LIKWID's perfgroup.c splits them), `LONG` free text.
/// Registers in formulas are replaced by the events the EVENTSET assigns them.
pub(crate) fn likwid(text: &str, file: &str) -> Result<Parsed, DslError> {
    #[derive(PartialEq)]
    enum S {
        Top,
        Events,
        Metrics,
        Long,
    }
    let group = std::path::Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().to_string());
    let mut state = S::Top;
    let mut short = None;
    let mut regs: BTreeMap<String, String> = BTreeMap::new();
    let mut p = Parsed::default();
    let mut seen = HashMap::new();
    for (ln, line) in text.lines().enumerate() {
        let ln = ln + 1;
        let t = line.trim();
        if state == S::Long {
            break;
        }
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(s) = t.strip_prefix("SHORT") {
            short = Some(s.trim().to_string());
            continue;
        }
        match t {
            "EVENTSET" => {
                state = S::Events;
                continue;
            }
            "METRICS" => {
                state = S::Metrics;
                continue;
            }
            "LONG" => {
                state = S::Long;
                continue;
            }
            _ => {}
        }
        let lead = line.len() - line.trim_start().len();
        match state {
            S::Events => {
                let mut it = t.split_whitespace();
                let (Some(reg), Some(ev)) = (it.next(), it.next()) else {
                    return Err(DslError::syntax(
                        pos(file, ln, col_of(line, lead)),
                        "expected `REGISTER EVENT`, found",
                        t,
                        None,
                    ));
                };
                regs.insert(reg.to_string(), ev.to_string());
            }
            S::Metrics => {
                let trimmed_end = line.trim_end();
                let f_at = trimmed_end
                    .char_indices()
                    .rev()
                    .find(|(_, c)| c.is_whitespace())
                    .map(|(k, c)| k + c.len_utf8())
                    .unwrap_or(lead);
                let formula = &trimmed_end[f_at..];
                let label = trimmed_end[..f_at].trim();
                if label.is_empty() {
                    return Err(DslError::syntax(
                        pos(file, ln, col_of(line, lead)),
                        "a metric needs a name before its formula:",
                        formula,
                        Some("write `Name [unit] formula`"),
                    ));
                }
                let (key, unit) = match (label.rfind('['), label.ends_with(']')) {
                    (Some(k), true) => (
                        label[..k].trim().to_string(),
                        Some(label[k + 1..label.len() - 1].trim().to_string()),
                    ),
                    _ => (label.to_string(), None),
                };
                let locate = infix::at_line(file, ln, col_of(line, f_at));
                let mut expr = infix::parse(formula, Dialect::Plain, &locate)?;
                expr.rename(&|n: &str| regs.get(n).cloned());
                let d = RawDef {
                    name: key,
                    group: group.clone(),
                    pos: pos(file, ln, col_of(line, lead)),
                    source: formula.to_string(),
                    expr,
                    description: short.clone(),
                    unit,
                };
                push_def(&mut p.defs, &mut seen, d, true, &mut p.notes)?;
            }
            S::Top => {
                return Err(DslError::syntax(
                    pos(file, ln, col_of(line, lead)),
                    "expected SHORT, EVENTSET, METRICS or LONG, found",
                    t.split_whitespace().next().unwrap_or(t),
                    None,
                ));
            }
            S::Long => {}
        }
    }
    Ok(p)
}

/// For a JSON string literal starting at byte `q` (its opening quote) of `raw`, the file
/// position of each char of the decoded string (plus one past the end).
fn json_string_positions(raw: &str, q: usize, file: &str, line0: usize, col0: usize) -> Vec<Pos> {
    let mut out = Vec::new();
    let mut line = line0;
    let mut col = col0 + 1;
    let mut it = raw[q + 1..].chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '"' => break,
            '\\' => {
                out.push(pos(file, line, col));
                match it.next() {
                    Some('u') => {
                        for _ in 0..4 {
                            it.next();
                        }
                        col += 6;
                    }
                    Some(_) => col += 2,
                    None => break,
                }
            }
            '\n' => {
                out.push(pos(file, line, col));
                line += 1;
                col = 1;
            }
            _ => {
                out.push(pos(file, line, col));
                col += 1;
            }
        }
    }
    out.push(pos(file, line, col));
    out
}

/// Linux perf metric JSON (`tools/perf/pmu-events/arch/*/*.json`): each object with a
/// `MetricExpr` is one definition named by `MetricName`; `MetricGroup`, `ScaleUnit` and
/// `BriefDescription` are kept. Expressions follow tools/perf/util/expr.y.
pub(crate) fn perf_json(text: &str, file: &str) -> Result<Parsed, DslError> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        DslError::syntax(
            pos(file, e.line(), e.column()),
            format!("invalid JSON ({e}) at"),
            text.lines()
                .nth(e.line().saturating_sub(1))
                .unwrap_or("")
                .trim()
                .chars()
                .take(40)
                .collect::<String>(),
            None,
        )
    })?;
    let serde_json::Value::Array(items) = v else {
        return Err(DslError::syntax(
            pos(file, 1, 1),
            "expected a JSON array of metrics, found",
            text.trim_start().chars().take(20).collect::<String>(),
            None,
        ));
    };
    // Byte offsets of each `"MetricExpr"` key, in file order (= array order).
    let keys: Vec<usize> = text
        .match_indices("\"MetricExpr\"")
        .map(|(i, _)| i)
        .collect();
    let mut next_key = 0;
    let mut p = Parsed::default();
    let mut seen = HashMap::new();
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    let locate_byte = |b: usize| -> (usize, usize) {
        let l = line_starts.partition_point(|&s| s <= b);
        (l, text[line_starts[l - 1]..b].chars().count() + 1)
    };
    for (k, item) in items.iter().enumerate() {
        let Some(expr) = item.get("MetricExpr").and_then(|e| e.as_str()) else {
            p.notes.push(format!(
                "{file}: entry {} has no MetricExpr; skipped",
                k + 1
            ));
            continue;
        };
        let name = item
            .get("MetricName")
            // Arm's files name standard metrics by `ArchStdEvent` instead of `MetricName`.
            .or_else(|| item.get("ArchStdEvent"))
            .and_then(|n| n.as_str())
            .unwrap_or("")
            .to_string();
        let positions = match keys.get(next_key) {
            Some(&kb) => {
                next_key += 1;
                let q = kb
                    + "\"MetricExpr\"".len()
                    + text[kb + "\"MetricExpr\"".len()..].find('"').unwrap_or(0);
                let (l, c) = locate_byte(q);
                json_string_positions(text, q, file, l, c)
            }
            None => Vec::new(),
        };
        let def_pos = positions
            .first()
            .cloned()
            .unwrap_or_else(|| pos(file, 1, 1));
        if name.is_empty() {
            return Err(DslError::syntax(
                def_pos,
                "a metric has no MetricName (or ArchStdEvent):",
                expr.chars().take(40).collect::<String>(),
                None,
            ));
        }
        let locate = |i: usize| {
            positions
                .get(i)
                .cloned()
                .or_else(|| positions.last().cloned())
                .unwrap_or_else(|| pos(file, 1, 1))
        };
        let e = infix::parse(expr, Dialect::Perf, &locate)?;
        let d = RawDef {
            name,
            group: item
                .get("MetricGroup")
                .and_then(|g| g.as_str())
                .map(str::to_string),
            pos: def_pos,
            source: expr.to_string(),
            expr: e,
            description: item
                .get("BriefDescription")
                .and_then(|g| g.as_str())
                .map(str::to_string),
            unit: item
                .get("ScaleUnit")
                .and_then(|g| g.as_str())
                .map(str::to_string),
        };
        push_def(&mut p.defs, &mut seen, d, true, &mut p.notes)?;
    }
    Ok(p)
}
