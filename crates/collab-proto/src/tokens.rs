//! `shell_tokens`: split an SSH exec command line into arguments the way a
//! POSIX shell would quote them, without ever running a shell. Single quotes
//! are literal, double quotes honour `\"` and `\\`, a backslash outside
//! quotes escapes the next character. Unclosed quotes, a trailing
//! backslash, empty arguments, control characters (NUL, tab, newline, …)
//! and over-long commands are refused. `;`, `|`, `$` and friends are plain
//! characters here.

/// The longest exec command accepted, in bytes.
pub const MAX_COMMAND_LEN: usize = 4096;

/// Why a command line was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("unclosed quote")]
    UnclosedQuote,
    #[error("trailing backslash")]
    TrailingBackslash,
    #[error("empty argument")]
    EmptyToken,
    #[error("control character in command")]
    ControlChar,
    #[error("command longer than {MAX_COMMAND_LEN} bytes")]
    TooLong,
    #[error("empty command")]
    Empty,
}

/// Split `input` into arguments. See the module documentation for the rules.
pub fn shell_tokens(input: &str) -> Result<Vec<String>, TokenError> {
    if input.len() > MAX_COMMAND_LEN {
        return Err(TokenError::TooLong);
    }
    if input.chars().any(char::is_control) {
        return Err(TokenError::ControlChar);
    }
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_token = false;
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' => {
                if in_token {
                    if current.is_empty() {
                        return Err(TokenError::EmptyToken);
                    }
                    tokens.push(std::mem::take(&mut current));
                    in_token = false;
                }
            }
            '\'' => {
                in_token = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => current.push(ch),
                        None => return Err(TokenError::UnclosedQuote),
                    }
                }
            }
            '"' => {
                in_token = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\')) => current.push(ch),
                            Some(ch) => {
                                current.push('\\');
                                current.push(ch);
                            }
                            None => return Err(TokenError::UnclosedQuote),
                        },
                        Some(ch) => current.push(ch),
                        None => return Err(TokenError::UnclosedQuote),
                    }
                }
            }
            '\\' => {
                in_token = true;
                match chars.next() {
                    Some(ch) => current.push(ch),
                    None => return Err(TokenError::TrailingBackslash),
                }
            }
            ch => {
                in_token = true;
                current.push(ch);
            }
        }
    }
    if in_token {
        if current.is_empty() {
            return Err(TokenError::EmptyToken);
        }
        tokens.push(current);
    }
    if tokens.is_empty() {
        return Err(TokenError::Empty);
    }
    Ok(tokens)
}

/// Single-quote `s` for a POSIX shell (and for `shell_tokens`): how the
/// client writes every argument of a remote command.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn splits_and_unquotes() {
        assert_eq!(shell_tokens("a  b").unwrap(), ["a", "b"]);
        assert_eq!(
            shell_tokens("git-upload-pack 'r.git'").unwrap(),
            ["git-upload-pack", "r.git"]
        );
        assert_eq!(
            shell_tokens(r#"x "a \"b\" \\ \n""#).unwrap(),
            ["x", r#"a "b" \ \n"#]
        );
        assert_eq!(shell_tokens(r"a\ b 'it'\''s'").unwrap(), ["a b", "it's"]);
        assert_eq!(
            shell_tokens("'r.git'; touch x").unwrap(),
            ["r.git;", "touch", "x"]
        );
        assert_eq!(shell_tokens(" lead trail ").unwrap(), ["lead", "trail"]);
    }

    #[test]
    fn refuses_bad_input() {
        assert_eq!(shell_tokens("a 'b"), Err(TokenError::UnclosedQuote));
        assert_eq!(shell_tokens("a \"b"), Err(TokenError::UnclosedQuote));
        assert_eq!(shell_tokens("a \\"), Err(TokenError::TrailingBackslash));
        assert_eq!(shell_tokens("a ''"), Err(TokenError::EmptyToken));
        assert_eq!(shell_tokens("\"\" a"), Err(TokenError::EmptyToken));
        assert_eq!(shell_tokens("a\0b"), Err(TokenError::ControlChar));
        assert_eq!(shell_tokens("a\tb"), Err(TokenError::ControlChar));
        assert_eq!(shell_tokens("a\nb"), Err(TokenError::ControlChar));
        assert_eq!(shell_tokens("a\u{1b}[0m"), Err(TokenError::ControlChar));
        assert_eq!(shell_tokens("   "), Err(TokenError::Empty));
        assert_eq!(
            shell_tokens(&"a".repeat(MAX_COMMAND_LEN + 1)),
            Err(TokenError::TooLong)
        );
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC*|[ '\"\\\\a-z\\x00-\\x1f]{0,64}") {
            let _ = shell_tokens(&s);
        }

        #[test]
        fn quoted_tokens_round_trip(tokens in prop::collection::vec("[^\\p{Cc}]{1,24}", 1..6)) {
            let line = tokens.iter().map(|t| shell_quote(t)).collect::<Vec<_>>().join(" ");
            prop_assert_eq!(shell_tokens(&line).unwrap(), tokens);
        }

        #[test]
        fn double_quoted_tokens_round_trip(tokens in prop::collection::vec("[^\\p{Cc}]{1,24}", 1..6)) {
            let line = tokens
                .iter()
                .map(|t| format!("\"{}\"", t.replace('\\', "\\\\").replace('"', "\\\"")))
                .collect::<Vec<_>>()
                .join(" ");
            prop_assert_eq!(shell_tokens(&line).unwrap(), tokens);
        }
    }
}
