//! `--loss PCT`: random loss on the underlay with an nft rule in B's
//! namespace, for every packet whatever its protocol, so UDP and TCP
//! transport see the same line (`braid netem` relays UDP only).

use crate::toolkit::lab::{self, Lab, LabResult};

/// Parses `1%`, `1` or `0.5%`: a loss rate from 0 to 50 %.
pub fn parse(s: &str) -> Result<f64, String> {
    s.trim_end_matches('%')
        .parse::<f64>()
        .ok()
        .filter(|p| (0.0..=50.0).contains(p))
        .ok_or_else(|| format!("--loss: {s:?} is not a percentage from 0 to 50"))
}

/// Drops `percent` % of the packets entering and, independently, of those
/// leaving `dev` in namespace `ns` (nft numgen, per mille resolution).
pub fn apply(lab: &Lab, ns: &str, dev: &str, percent: f64) -> LabResult<()> {
    let per_mille = (percent * 10.0).round() as u32;
    let rules = format!(
        "table inet braid_bench_loss {{\n\
         \tchain in {{ type filter hook input priority 0; iifname \"{dev}\" numgen random mod 1000 < {per_mille} drop; }}\n\
         \tchain out {{ type filter hook output priority 0; oifname \"{dev}\" numgen random mod 1000 < {per_mille} drop; }}\n\
         }}\n"
    );
    let file = lab.dir().join("underlay-loss.nft");
    std::fs::write(&file, rules).map_err(|e| format!("write {}: {e}", file.display()))?;
    lab::run(lab.cmd_in(ns, "nft").arg("-f").arg(&file))
        .map(drop)
        .map_err(|e| format!("nft loss rule in {ns}: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn percentages() {
        assert_eq!(super::parse("1%"), Ok(1.0));
        assert_eq!(super::parse("0.5"), Ok(0.5));
        assert!(super::parse("51%").is_err());
        assert!(super::parse("x").is_err());
    }
}
