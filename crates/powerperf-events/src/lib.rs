//! The event DSL: derived-event and metric definitions from PAPI, Linux perf, LIKWID,
//! PerfExpert and plain infix files, compiled to one bytecode and evaluated in f64.
//!
//! ```no_run
//! use powerperf_events::{load_file, LoadOptions};
//! let set = load_file("defs.txt".as_ref(), None, &LoadOptions::default())?;
//! let values = set.evaluate(&|name: &str| match name {
//!     "PAPI_TOT_INS" => Some(1000.0),
//!     _ => None,
//! });
//! for v in &values {
//!     println!("{} = {:?}", v.name, v.value);
//! }
//! # Ok::<(), powerperf_events::DslError>(())
//! ```
//!
//! Formats and their sources are described in `docs/events.md`. Every error names the file,
//! line, column and token ([`DslError`]).

pub mod alias;
pub mod ast;
pub mod bytecode;
pub mod constants;
pub mod error;
mod formats;
pub mod infix;
pub mod lcpi;
pub mod rpn;

pub use formats::CPU_MAX_HZ;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

pub use bytecode::{Op, Program, CHUNK};
pub use error::{DslError, Pos};

use ast::Expr;

/// Deepest nesting of an expression (parentheses, operators, RPN operands) any parser
/// accepts; deeper input is [`DslError::TooDeep`], never a stack overflow.
pub const MAX_DEPTH: usize = 256;

/// The definition formats (the `--syntax` names of `events` and `import --derive`). This
/// enum is the one list of them: [`Syntax::ALL`], [`Syntax::name`], [`Syntax::NAMES`] and
/// `FromStr` are what the CLI, the error messages and the fuzz target use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syntax {
    /// PAPI user-defined events: `#define NAME value` and `Name, tok|tok|op|…` (Moore & Ralph 2011).
    PapiUser,
    /// PAPI's `papi_events.csv` presets.
    PapiCsv,
    /// PerfExpert `lcpi.properties` / `machine.properties`: `name = infix`.
    PerfExpert,
    /// LIKWID performance groups (SHORT, EVENTSET, METRICS, LONG).
    Likwid,
    /// Linux perf metric JSON (`MetricName`, `MetricExpr`, …).
    PerfJson,
    /// `Name = formula` lines, or bare formulas named by their text.
    Infix,
}

impl Syntax {
    /// Every format, in the order the help lists them.
    pub const ALL: [Syntax; 6] = [
        Syntax::PapiUser,
        Syntax::PapiCsv,
        Syntax::PerfExpert,
        Syntax::Likwid,
        Syntax::PerfJson,
        Syntax::Infix,
    ];

    /// The `--syntax` names, in the order of [`Syntax::ALL`].
    pub const NAMES: [&'static str; 6] = {
        let mut names = [""; 6];
        let mut i = 0;
        while i < names.len() {
            names[i] = Syntax::ALL[i].name();
            i += 1;
        }
        names
    };

    /// The `--syntax` name.
    pub const fn name(self) -> &'static str {
        match self {
            Syntax::PapiUser => "papi-user",
            Syntax::PapiCsv => "papi-csv",
            Syntax::PerfExpert => "perfexpert",
            Syntax::Likwid => "likwid",
            Syntax::PerfJson => "perf-json",
            Syntax::Infix => "infix",
        }
    }

    /// Parse a `--syntax` name.
    pub fn from_name(s: &str) -> Option<Syntax> {
        Syntax::ALL.into_iter().find(|x| x.name() == s)
    }
}

impl std::fmt::Display for Syntax {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of [`Syntax::NAMES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownSyntaxName(pub String);

impl std::fmt::Display for UnknownSyntaxName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown syntax `{}`", self.0)
    }
}

impl std::error::Error for UnknownSyntaxName {}

impl std::str::FromStr for Syntax {
    type Err = UnknownSyntaxName;

    /// [`Syntax::from_name`].
    fn from_str(s: &str) -> Result<Syntax, UnknownSyntaxName> {
        Syntax::from_name(s).ok_or_else(|| UnknownSyntaxName(s.to_string()))
    }
}

/// Options for loading a file.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// `papi_events.csv` only: the `CPU,<pmu>` section to take (case-insensitive). Without
    /// it every section is loaded and each name is qualified as `<section>/<preset>`.
    pub cpu: Option<String>,
}

/// One definition as a format parser produced it, before compilation.
#[derive(Debug, Clone)]
pub(crate) struct RawDef {
    pub name: String,
    pub group: Option<String>,
    pub pos: Pos,
    pub source: String,
    pub expr: Expr,
    pub description: Option<String>,
    pub unit: Option<String>,
}

/// What a format parser returns.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub defs: Vec<RawDef>,
    /// Constants defined in the file (`#define`), folded into the bytecode.
    pub constants: BTreeMap<String, f64>,
    pub notes: Vec<String>,
}

/// A compiled definition.
#[derive(Debug, Clone)]
pub struct Definition {
    /// The name a user refers to it by (LIKWID: without the unit).
    pub name: String,
    /// Section, group or metric group it came from, when the format has them.
    pub group: Option<String>,
    /// Where it is defined.
    pub pos: Pos,
    /// The formula as written.
    pub source: String,
    pub description: Option<String>,
    /// Unit as the file states it (LIKWID `[MB/s]`, perf `ScaleUnit`).
    pub unit: Option<String>,
    pub program: Program,
    /// Events and external constants it reads directly, in order of appearance.
    pub vars: Vec<String>,
    /// Constants of the file folded into it.
    pub file_constants: Vec<String>,
    /// Other definitions of the set it refers to.
    pub refs: Vec<String>,
}

/// Why a definition has no value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Problem {
    /// Events or constants without a value (directly or through referenced definitions).
    Missing(Vec<String>),
    /// A plain `/` divided by zero (perf's `d_ratio` gives 0 instead).
    DivisionByZero,
    /// The result is NaN or infinite for another reason.
    NotFinite,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Missing(v) => write!(f, "not computable: missing {}", v.join(", ")),
            Problem::DivisionByZero => f.write_str("division by zero"),
            Problem::NotFinite => f.write_str("not finite"),
        }
    }
}

/// The value of one definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub name: String,
    /// `None` when undefined, NaN or infinite; `problem` says why.
    pub value: Option<f64>,
    pub problem: Option<Problem>,
}

/// A compiled set of definitions from one file.
#[derive(Debug, Clone)]
pub struct DefinitionSet {
    /// The file name as given.
    pub file: String,
    pub syntax: Syntax,
    pub definitions: Vec<Definition>,
    /// Variable slots: events and external constants, by slot.
    pub variables: Vec<String>,
    /// Constants defined in the file.
    pub file_constants: BTreeMap<String, f64>,
    /// Things the loader wants the user to know (redefinitions, skipped entries).
    pub notes: Vec<String>,
    /// Definition indices in evaluation order (every definition after those it refers to).
    order: Vec<usize>,
}

/// Read and compile `path`; `syntax` overrides the format found from the name and content.
///
/// # Errors
/// [`DslError::Io`], [`DslError::UnknownSyntax`], and every parse or compile error with the
/// file, line, column and token.
pub fn load_file(
    path: &Path,
    syntax: Option<Syntax>,
    opts: &LoadOptions,
) -> Result<DefinitionSet, DslError> {
    let text = std::fs::read_to_string(path).map_err(|source| DslError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path.display().to_string();
    load_str(&text, &name, syntax, opts)
}

/// Compile definitions given as text; `file` names it in errors and selects the format when
/// `syntax` is `None`.
///
/// # Errors
/// As [`load_file`].
pub fn load_str(
    text: &str,
    file: &str,
    syntax: Option<Syntax>,
    opts: &LoadOptions,
) -> Result<DefinitionSet, DslError> {
    let syntax = match syntax {
        Some(s) => s,
        None => detect(file, text)?,
    };
    let parsed = match syntax {
        Syntax::PapiUser => formats::papi_user(text, file)?,
        Syntax::PapiCsv => formats::papi_csv(text, file, opts)?,
        Syntax::PerfExpert => formats::infix_lines(text, file, true)?,
        Syntax::Infix => formats::infix_lines(text, file, false)?,
        Syntax::Likwid => formats::likwid(text, file)?,
        Syntax::PerfJson => formats::perf_json(text, file)?,
    };
    compile_set(parsed, file, syntax)
}

/// Tell the format of a file from its name and content.
///
/// # Errors
/// [`DslError::UnknownSyntax`] for an empty file.
pub fn detect(file: &str, text: &str) -> Result<Syntax, DslError> {
    let lower = file.to_ascii_lowercase();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(DslError::UnknownSyntax {
            file: file.into(),
            why: "it holds no definitions".into(),
        });
    }
    if lower.ends_with(".json") || text.trim_start().starts_with('[') {
        return Ok(Syntax::PerfJson);
    }
    if lines.contains(&"EVENTSET") && lines.contains(&"METRICS") {
        return Ok(Syntax::Likwid);
    }
    if lines
        .iter()
        .any(|l| l.starts_with("CPU,") || l.starts_with("PRESET,"))
    {
        return Ok(Syntax::PapiCsv);
    }
    if lower.ends_with(".properties") {
        return Ok(Syntax::PerfExpert);
    }
    let papi_like = lines.iter().any(|l| {
        l.starts_with("#define")
            || (!l.starts_with('#')
                && l.find(',').is_some_and(|c| {
                    !l[..c].contains('=') && !l[..c].contains('(') && !l.contains('=')
                }))
    });
    if papi_like {
        return Ok(Syntax::PapiUser);
    }
    Ok(Syntax::Infix)
}

/// Compile parsed definitions: resolve names (file constant, definition, or variable), order
/// the definitions so each comes after those it uses, and reject cycles.
fn compile_set(parsed: Parsed, file: &str, syntax: Syntax) -> Result<DefinitionSet, DslError> {
    let Parsed {
        defs,
        constants,
        notes,
    } = parsed;
    let index: HashMap<String, usize> = defs
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name.clone(), i))
        .collect();
    let mut variables: Vec<String> = Vec::new();
    let mut slots: HashMap<String, u32> = HashMap::new();
    let mut out = Vec::with_capacity(defs.len());
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(defs.len());
    for d in defs.iter() {
        let mut vars = Vec::new();
        let mut fconsts = Vec::new();
        let mut refs: Vec<usize> = Vec::new();
        let slot_of =
            |name: &str, variables: &mut Vec<String>, slots: &mut HashMap<String, u32>| -> u32 {
                *slots.entry(name.to_string()).or_insert_with(|| {
                    variables.push(name.to_string());
                    (variables.len() - 1) as u32
                })
            };
        let program = {
            let mut resolve = |name: &str| -> bytecode::Resolved {
                if let Some(&j) = index.get(name) {
                    if !refs.contains(&j) {
                        refs.push(j)
                    }
                    return bytecode::Resolved::Def(j as u32);
                }
                if let Some(&v) = constants.get(name) {
                    if !fconsts.iter().any(|c: &String| c == name) {
                        fconsts.push(name.to_string())
                    }
                    return bytecode::Resolved::Const(v);
                }
                if !vars.iter().any(|c: &String| c == name) {
                    vars.push(name.to_string())
                }
                bytecode::Resolved::Var(slot_of(name, &mut variables, &mut slots))
            };
            let mut def_names: Vec<String> = Vec::new();
            let p = bytecode::compile(&d.expr, &mut resolve, &mut |name: &str| {
                def_names.push(name.to_string());
                u32::MAX
            });
            (p, def_names)
        };
        let (mut program, def_names) = program;
        // `has_event(E)` reads the presence of E: give it a variable slot.
        if !def_names.is_empty() {
            let mut k = 0;
            for op in program.ops.iter_mut() {
                if let Op::Defined(s) = op {
                    let n = &def_names[k];
                    k += 1;
                    if !vars.contains(n) {
                        vars.push(n.clone())
                    }
                    *s = slot_of(n, &mut variables, &mut slots);
                }
            }
        }
        refs.sort_unstable();
        deps.push(refs.clone());
        out.push(Definition {
            name: d.name.clone(),
            group: d.group.clone(),
            pos: d.pos.clone(),
            source: d.source.clone(),
            description: d.description.clone(),
            unit: d.unit.clone(),
            program,
            vars,
            file_constants: fconsts,
            refs: refs.iter().map(|&j| defs[j].name.clone()).collect(),
        });
    }
    let order = topo_order(&out, &deps)?;
    Ok(DefinitionSet {
        file: file.to_string(),
        syntax,
        definitions: out,
        variables,
        file_constants: constants,
        notes,
        order,
    })
}

/// Kahn's algorithm (no recursion); on a cycle, report one cycle path.
fn topo_order(defs: &[Definition], deps: &[Vec<usize>]) -> Result<Vec<usize>, DslError> {
    let n = defs.len();
    let mut indeg = vec![0usize; n];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, ds) in deps.iter().enumerate() {
        for &j in ds {
            indeg[i] += 1;
            users[j].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..n).rev().filter(|&i| indeg[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &u in &users[i] {
            indeg[u] -= 1;
            if indeg[u] == 0 {
                ready.push(u)
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk dependencies among the unfinished definitions until one repeats.
    let start = (0..n).find(|&i| indeg[i] > 0).unwrap_or(0);
    let mut path = vec![start];
    let mut seen: HashMap<usize, usize> = HashMap::from([(start, 0)]);
    let mut cur = start;
    loop {
        let next = deps[cur]
            .iter()
            .copied()
            .find(|&j| indeg[j] > 0)
            .unwrap_or(start);
        if let Some(&k) = seen.get(&next) {
            let mut cycle: Vec<String> = path[k..].iter().map(|&i| defs[i].name.clone()).collect();
            cycle.push(defs[next].name.clone());
            let d = &defs[next];
            return Err(DslError::Cycle {
                pos: d.pos.clone(),
                name: d.name.clone(),
                cycle,
            });
        }
        seen.insert(next, path.len());
        path.push(next);
        cur = next;
    }
}

impl DefinitionSet {
    /// The definition called `name`.
    pub fn get(&self, name: &str) -> Option<&Definition> {
        self.definitions.iter().find(|d| d.name == name)
    }

    /// The RPN form of definition `i`: tokens joined by `|` as PAPI writes them, names for
    /// loads, `def:NAME` for references to other definitions.
    pub fn rpn(&self, i: usize) -> String {
        let d = &self.definitions[i];
        let mut toks = Vec::with_capacity(d.program.ops.len());
        for op in &d.program.ops {
            toks.push(match op {
                Op::Const(v) => format!("{v}"),
                Op::Load(s) => self.variables[*s as usize].clone(),
                Op::LoadDef(j) => format!("def:{}", self.definitions[*j as usize].name),
                Op::Defined(s) => format!("{}|defined", self.variables[*s as usize]),
                o => o.symbol().to_string(),
            });
        }
        toks.join("|")
    }

    /// Every variable a definition needs, through the definitions it refers to.
    pub fn needs(&self, i: usize) -> Vec<String> {
        let mut out: BTreeSet<String> = BTreeSet::new();
        let mut stack = vec![i];
        let mut seen = BTreeSet::new();
        while let Some(k) = stack.pop() {
            if !seen.insert(k) {
                continue;
            }
            let d = &self.definitions[k];
            out.extend(d.vars.iter().cloned());
            for r in &d.refs {
                if let Some(j) = self.definitions.iter().position(|x| &x.name == r) {
                    stack.push(j)
                }
            }
        }
        out.into_iter().collect()
    }

    /// Evaluate every definition once; `lookup` gives the value of an event or external
    /// constant (`None` when it has none). Values are in definition order.
    pub fn evaluate(&self, lookup: &dyn Fn(&str) -> Option<f64>) -> Vec<Value> {
        let mut vars = Vec::with_capacity(self.variables.len());
        let mut present = Vec::with_capacity(self.variables.len());
        for v in &self.variables {
            let x = lookup(v);
            present.push(x.is_some());
            vars.push(x.unwrap_or(f64::NAN));
        }
        let n = self.definitions.len();
        let mut results = vec![f64::NAN; n];
        let mut problems: Vec<Option<Problem>> = vec![None; n];
        let mut stack = Vec::new();
        for &i in &self.order {
            let d = &self.definitions[i];
            let mut flags = bytecode::Flags::default();
            let v = d
                .program
                .eval(&vars, &present, &results, &mut stack, &mut flags);
            results[i] = v;
            if !v.is_finite() {
                let mut missing: BTreeSet<String> = d
                    .vars
                    .iter()
                    .filter(|x| !present[self.variables.iter().position(|y| y == *x).unwrap_or(0)])
                    .cloned()
                    .collect();
                for r in &d.refs {
                    if let Some(j) = self.definitions.iter().position(|x| &x.name == r) {
                        if let Some(Problem::Missing(m)) = &problems[j] {
                            missing.extend(m.iter().cloned());
                        }
                    }
                }
                let dep_div = d.refs.iter().any(|r| {
                    self.definitions
                        .iter()
                        .position(|x| &x.name == r)
                        .is_some_and(|j| problems[j] == Some(Problem::DivisionByZero))
                });
                problems[i] = Some(if !missing.is_empty() {
                    Problem::Missing(missing.into_iter().collect())
                } else if flags.div_by_zero || dep_div {
                    Problem::DivisionByZero
                } else {
                    Problem::NotFinite
                });
            }
        }
        self.definitions
            .iter()
            .enumerate()
            .map(|(i, d)| Value {
                name: d.name.clone(),
                value: results[i].is_finite().then_some(results[i]),
                problem: problems[i].clone(),
            })
            .collect()
    }

    /// Bind each variable to a column of `n_rows` rows for [`Self::evaluate_columns`]: a
    /// column of `cols` (by its own name or through the alias table, as `resolver` resolves
    /// it; `resolver.values` must hold every column name), a constant broadcast to every
    /// row, or the rows' durations in seconds (`duration_time`). Variables with none are
    /// left out (they read NaN).
    pub fn bind_columns(
        &self,
        resolver: &alias::Resolver,
        cols: &BTreeMap<String, Vec<f64>>,
        dur_s: &[f64],
    ) -> BTreeMap<String, Vec<f64>> {
        use alias::Resolution;
        let n = dur_s.len();
        let mut bound = BTreeMap::new();
        for var in &self.variables {
            let col = match resolver.resolve(var) {
                Resolution::Column { column, .. } | Resolution::Alias { column, .. } => {
                    cols.get(&column).cloned()
                }
                Resolution::Constant { value, .. } => Some(vec![value; n]),
                Resolution::Duration { .. } => Some(dur_s.to_vec()),
                Resolution::Missing { .. } => None,
            };
            if let Some(c) = col {
                bound.insert(var.clone(), c);
            }
        }
        bound
    }

    /// Evaluate every definition over columns of `n_rows` rows (a timeline, a training
    /// set): `column(name)` gives a variable's column (at least `n_rows` long) or `None` when
    /// it is missing (then it reads NaN). Returns one column per definition, in definition
    /// order; plain division by zero gives NaN in that row.
    pub fn evaluate_columns<'a>(
        &self,
        column: &dyn Fn(&str) -> Option<&'a [f64]>,
        n_rows: usize,
    ) -> Vec<Vec<f64>> {
        let nan = vec![f64::NAN; n_rows];
        let mut present = Vec::new();
        let cols: Vec<&[f64]> = self
            .variables
            .iter()
            .map(|v| match column(v) {
                Some(c) if c.len() >= n_rows => {
                    present.push(true);
                    c
                }
                _ => {
                    present.push(false);
                    nan.as_slice()
                }
            })
            .collect();
        let mut out: Vec<Vec<f64>> = vec![vec![f64::NAN; n_rows]; self.definitions.len()];
        let mut stack = Vec::new();
        let mut start = 0;
        while start < n_rows {
            let n = CHUNK.min(n_rows - start);
            let var_chunks: Vec<&[f64]> = cols.iter().map(|c| &c[start..start + n]).collect();
            for &i in &self.order {
                let mut buf = [0.0f64; CHUNK];
                {
                    let def_chunks: Vec<&[f64]> =
                        out.iter().map(|c| &c[start..start + n]).collect();
                    self.definitions[i].program.eval_chunk(
                        &var_chunks,
                        &present,
                        &def_chunks,
                        n,
                        &mut stack,
                        &mut buf,
                    );
                }
                out[i][start..start + n].copy_from_slice(&buf[..n]);
            }
            start += n;
        }
        out
    }
}
