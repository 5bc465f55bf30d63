//! A device by name, with cubecl configured first on a GPU.

/// Applies cubecl's settings (cubecl.toml, `CUBECL_*`, `autotune`) for a GPU device, then opens
/// the device by name with the staging pool that suits it (om4_burn::TrainingDevice). The settings
/// are printed once, on the first GPU device opened.
pub(crate) fn open(
    name: &str,
    autotune: Option<om4_burn::AutotuneLevel>,
) -> Result<om4_burn::TrainingDevice, Box<dyn std::error::Error>> {
    static CONFIGURED: std::sync::Once = std::sync::Once::new();
    let parsed: om4_burn::DeviceName = name.parse()?;
    if parsed.is_gpu() {
        let mut result = Ok(());
        CONFIGURED.call_once(|| {
            result =
                om4_burn::configure_cubecl(&om4_burn::CubeclSettings { autotune_level: autotune }).map(|summary| {
                    if let Some(s) = summary {
                        let logs: Vec<String> = s.logs.iter().map(|p| p.display().to_string()).collect();
                        println!(
                            "cubecl: autotune level {}, kernel cache {}, logs {}",
                            s.autotune_level,
                            if s.kernel_cache { "on" } else { "off" },
                            if logs.is_empty() { "off".to_string() } else { logs.join(", ") }
                        );
                    }
                });
        });
        result?;
    }
    Ok(om4_burn::TrainingDevice::open(name)?)
}
