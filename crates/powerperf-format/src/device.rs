//! The device a knob belongs to (`knob_devices` of set.toml, the import spec's `[[knob]]
//! device`; issue 20, item 4).

/// Check a knob's device name (`cpu`, `gpu`, `gpu<i>`) and give its canonical form (`gpu`
/// is GPU 0: `gpu0`).
///
/// # Errors
/// Any other text, with the accepted forms.
pub fn canonical_device(text: &str) -> Result<String, String> {
    let t = text.trim().to_ascii_lowercase();
    if t == "cpu" {
        return Ok(t);
    }
    if t == "gpu" {
        return Ok("gpu0".into());
    }
    if let Some(i) = t.strip_prefix("gpu") {
        if !i.is_empty() && i.len() <= 4 && i.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = i.parse::<u32>() {
                return Ok(format!("gpu{n}"));
            }
        }
    }
    Err(format!(
        "device `{text}` is not `cpu`, `gpu` (GPU 0) or `gpu<i>` (e.g. `gpu1`)"
    ))
}

#[cfg(test)]
mod device_tests {
    #[test]
    fn device_names_are_cpu_or_gpu_with_an_index() {
        use super::canonical_device as c;
        assert_eq!(c("cpu").unwrap(), "cpu");
        assert_eq!(c("GPU").unwrap(), "gpu0");
        assert_eq!(c("gpu3").unwrap(), "gpu3");
        for bad in ["", "gpu-1", "tpu", "gpu99999", "gpu1x"] {
            assert!(c(bad).unwrap_err().contains("is not `cpu`"), "{bad}");
        }
    }

    #[test]
    fn a_set_toml_without_knob_devices_still_loads() {
        let m = crate::set::SetMeta::from_toml(
            "source = \"collect\"\nknobs = [\"core_freq_mhz\"]\ntargets = [\"time_s\"]\n",
        )
        .unwrap();
        assert!(m.knob_devices.is_empty());
    }
}
