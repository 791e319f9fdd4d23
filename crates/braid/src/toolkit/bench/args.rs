//! What the benches' command lines share: flags that take a value, whole
//! numbers within bounds, and the check for root.

use std::fmt::Display;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// The arguments after `braid bench NAME`, taken one at a time; a flag
/// that takes a value asks for it with [`value`](Self::value) or
/// [`number`](Self::number).
pub struct Args<'a> {
    rest: std::slice::Iter<'a, String>,
}

impl<'a> Args<'a> {
    pub fn new(argv: &'a [String]) -> Args<'a> {
        Args { rest: argv.iter() }
    }

    /// The value after `flag`.
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        self.rest
            .next()
            .cloned()
            .ok_or_else(|| format!("{flag} needs a value"))
    }

    /// The value after `flag`, a number within `range`.
    pub fn number<T>(&mut self, flag: &str, range: RangeInclusive<T>) -> Result<T, String>
    where
        T: FromStr + PartialOrd + Display,
    {
        let v = self.value(flag)?;
        v.parse::<T>()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| {
                format!(
                    "{flag}: {v:?} is not a number from {} to {}",
                    range.start(),
                    range.end()
                )
            })
    }
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        self.rest.next().map(String::as_str)
    }
}

/// `Err` naming the bench unless this process runs as root (namespaces,
/// TUN devices).
pub fn require_root(bench: &str) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        Ok(())
    } else {
        Err(format!(
            "bench {bench} needs root (network namespaces, TUN)"
        ))
    }
}

/// A command line from words, for the benches' argument tests.
#[cfg(test)]
pub fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_numbers_name_the_flag() {
        let v = argv("--seconds 5 --rounds 0 --label");
        let mut a = Args::new(&v);
        assert_eq!(a.next(), Some("--seconds"));
        assert_eq!(a.number("--seconds", 1..=600u32), Ok(5));
        assert_eq!(a.next(), Some("--rounds"));
        assert_eq!(
            a.number("--rounds", 1..=50usize),
            Err("--rounds: \"0\" is not a number from 1 to 50".into())
        );
        assert_eq!(a.next(), Some("--label"));
        assert_eq!(a.value("--label"), Err("--label needs a value".into()));
        assert_eq!(a.next(), None);
    }
}
