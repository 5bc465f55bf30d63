//! Channel names: `thetao_4` (variable and level), `zos` (level-free), legacy `thetao_lev_2_5`.

/// Channels Samudra computes at load time rather than reading, with how.
pub(crate) const DERIVED: &[(&str, &str)] =
    &[("hfds_anomalies", "hfds minus its day-of-year climatology over the loaded period")];

/// Splits `var_k` into `("var", k)`; `None` when the name does not end in `_<digits>`.
pub(crate) fn split_level(name: &str) -> Option<(&str, usize)> {
    let (var, level) = name.rsplit_once('_')?;
    if var.is_empty() || level.is_empty() || !level.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((var, level.parse().ok()?))
}

/// Parses a legacy flat name `var_lev_<depth>` (depth with `.` written as `_`) into `("var", depth)`.
pub(crate) fn split_legacy(name: &str) -> Option<(&str, f64)> {
    let (var, depth) = name.split_once("_lev_")?;
    let depth = depth.replacen('_', ".", 1);
    Some((var, depth.parse().ok()?))
}

/// Why a channel is derived, if it is.
pub(crate) fn derived_reason(name: &str) -> Option<String> {
    if let Some((_, why)) = DERIVED.iter().find(|(n, _)| *n == name) {
        return Some((*why).to_string());
    }
    name.strip_suffix("_anomalies").map(|base| format!("anomaly of {base}, computed at load time"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(split_level("thetao_4"), Some(("thetao", 4)));
        assert_eq!(split_level("mask_18"), Some(("mask", 18)));
        assert_eq!(split_level("zos"), None);
        assert_eq!(split_level("so_lev_1040_0"), Some(("so_lev_1040", 0)));
        assert_eq!(split_legacy("so_lev_1040_0"), Some(("so", 1040.0)));
        assert_eq!(split_legacy("thetao_lev_2_5"), Some(("thetao", 2.5)));
        assert!(derived_reason("hfds_anomalies").is_some());
        assert!(derived_reason("hfds").is_none());
    }
}
