//! Every ```events example of docs/events.md compiles and evaluates to the ```json block
//! that follows it.

use powerperf_events::{load_str, LoadOptions, Syntax};

#[test]
fn docs_examples_evaluate_as_shown() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/events.md")).unwrap();
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut lines = doc.lines();
    while let Some(l) = lines.next() {
        if let Some(info) = l.strip_prefix("```") {
            let mut body = String::new();
            for b in lines.by_ref() {
                if b.starts_with("```") {
                    break;
                }
                body.push_str(b);
                body.push('\n');
            }
            blocks.push((info.trim().to_string(), body));
        }
    }
    let mut checked = 0;
    for (k, (info, body)) in blocks.iter().enumerate() {
        let Some(spec) = info.strip_prefix("events ") else {
            continue;
        };
        let mut words = spec.split_whitespace();
        let syntax = Syntax::from_name(words.next().unwrap()).expect("syntax name");
        let (mut file, mut cpu, mut values) = ("doc.txt".to_string(), None, Vec::new());
        for w in words {
            let (key, v) = w.split_once('=').unwrap();
            match key {
                "file" => file = v.to_string(),
                "cpu" => cpu = Some(v.to_string()),
                "values" => {
                    for item in v.split(',') {
                        let (n, x) = item.split_once('=').unwrap();
                        values.push((n.to_string(), x.parse::<f64>().unwrap()));
                    }
                }
                other => panic!("unknown key {other}"),
            }
        }
        let set = load_str(body, &file, Some(syntax), &LoadOptions { cpu })
            .unwrap_or_else(|e| panic!("docs example {k}: {e}"));
        let got = set.evaluate(&|n: &str| values.iter().find(|(a, _)| a == n).map(|x| x.1));
        let (next_info, expected) = &blocks[k + 1];
        assert_eq!(
            next_info, "json",
            "example {k} is followed by its JSON result"
        );
        let want: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(expected).unwrap();
        assert_eq!(want.len(), got.len(), "example {k}: {got:?}");
        for v in &got {
            let w = want
                .get(&v.name)
                .unwrap_or_else(|| panic!("example {k}: {} not in the docs", v.name));
            match (w.as_f64(), v.value) {
                (Some(a), Some(b)) => assert!(
                    (a - b).abs() <= 1e-12 * a.abs().max(1.0),
                    "example {k}: {} = {b}, docs say {a}",
                    v.name
                ),
                (None, None) => {}
                (a, b) => panic!("example {k}: {} = {b:?}, docs say {a:?}", v.name),
            }
        }
        checked += 1;
    }
    assert!(checked >= 6, "found {checked} examples");
}

/// The `--syntax` list of docs/events.md is `Syntax::NAMES` (the names' one home).
#[test]
fn docs_syntax_list_is_syntax_names() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/events.md")).unwrap();
    let list = format!("`--syntax {}`", Syntax::NAMES.join("|"));
    assert!(doc.contains(&list), "docs/events.md should name {list}");
}
