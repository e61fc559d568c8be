//! The command line of latlab's link tools: `--flag value` pairs, nothing else.

/// The program's arguments as (flag, value) pairs, in order; an error naming the flag
/// (and `usage`, when given) if the last flag has no value.
pub fn flag_values(usage: &str) -> Result<Vec<(String, String)>, String> {
    pairs(std::env::args().skip(1), usage)
}

fn pairs(
    mut args: impl Iterator<Item = String>,
    usage: &str,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            let hint = if usage.is_empty() {
                String::new()
            } else {
                format!("; {usage}")
            };
            return Err(format!("{flag} needs a value{hint}"));
        };
        out.push((flag, value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> impl Iterator<Item = String> + '_ {
        text.split_whitespace().map(String::from)
    }

    #[test]
    fn pairs_flags_with_their_values() {
        let got = pairs(words("--a 1 --b x"), "u").unwrap();
        assert_eq!(
            got,
            vec![("--a".into(), "1".into()), ("--b".into(), "x".into())]
        );
    }

    #[test]
    fn a_flag_without_value_is_named() {
        assert_eq!(
            pairs(words("--a 1 --b"), "usage: x").unwrap_err(),
            "--b needs a value; usage: x"
        );
        assert_eq!(pairs(words("--b"), "").unwrap_err(), "--b needs a value");
    }
}
