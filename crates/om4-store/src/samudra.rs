//! Samudra's vocabulary for OM4: its levels, variables and channel names.

/// OM4 level centres (m).
pub const LEV: [f64; 19] = [
    2.5, 10.0, 22.5, 40.0, 65.0, 105.0, 165.0, 250.0, 375.0, 550.0, 775.0, 1050.0, 1400.0, 1850.0, 2400.0, 3100.0,
    4000.0, 5000.0, 6000.0,
];
/// OM4 level thicknesses (m).
pub const DZ: [f64; 19] = [
    5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 70.0, 100.0, 150.0, 200.0, 250.0, 300.0, 400.0, 500.0, 600.0, 800.0, 1000.0,
    1000.0, 1000.0,
];
/// Variables with a level axis, in Samudra's prognostic order.
pub const DEPTH_VARS: [&str; 4] = ["uo", "vo", "thetao", "so"];
/// Level-free variables.
pub const SURFACE_VARS: [&str; 4] = ["zos", "tauuo", "tauvo", "hfds"];

/// Samudra's channel names for a store of `levels` levels, in its order: `uo_*, vo_*, thetao_*, so_*, zos, tauuo, tauvo, hfds`.
pub fn channel_names(levels: usize) -> Vec<String> {
    DEPTH_VARS
        .iter()
        .flat_map(|v| (0..levels).map(move |k| format!("{v}_{k}")))
        .chain(SURFACE_VARS.iter().map(|v| (*v).to_string()))
        .collect()
}
