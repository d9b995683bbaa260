//! git-lfs pointer files: what git stores in place of a tracked file
//! (`version https://git-lfs.github.com/spec/v1`, `oid sha256:<hex>`,
//! `size <n>`, sorted keys, one per line). The web's raw page serves the
//! object a pointer names instead of the pointer.

use super::store::valid_oid;

/// Pointer files are small; anything longer is not one.
pub const MAX_POINTER: usize = 1024;

const VERSION: &str = "version https://git-lfs.github.com/spec/v1";

/// The object (oid, size) `blob` points at, if it is a pointer file.
pub fn parse(blob: &[u8]) -> Option<(String, u64)> {
    if blob.len() > MAX_POINTER {
        return None;
    }
    let text = std::str::from_utf8(blob).ok()?;
    let mut lines = text.lines();
    if lines.next()? != VERSION {
        return None;
    }
    let (mut oid, mut size) = (None, None);
    for line in lines {
        let (key, value) = line.split_once(' ')?;
        match key {
            "oid" => oid = Some(value.strip_prefix("sha256:")?.to_string()),
            "size" => size = Some(value.parse::<u64>().ok()?),
            _ => {}
        }
    }
    let oid = oid.filter(|o| valid_oid(o))?;
    Some((oid, size?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pointers_and_nothing_else() {
        let oid = "4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393";
        let pointer = format!("{VERSION}\noid sha256:{oid}\nsize 12345\n");
        assert_eq!(parse(pointer.as_bytes()), Some((oid.to_string(), 12345)));
        for bad in [
            format!("{VERSION}\noid sha256:{}\nsize 1\n", &oid[..60]),
            format!("{VERSION}\noid md5:{oid}\nsize 1\n"),
            format!("{VERSION}\noid sha256:{oid}\n"),
            format!("version 2\noid sha256:{oid}\nsize 1\n"),
            "just text\n".to_string(),
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad}");
        }
    }
}
