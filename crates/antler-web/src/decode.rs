//! Bytes → text for fetched pages, choosing the encoding as a browser does: a byte-order mark,
//! then the `Content-Type` charset, then (HTML) a `<meta charset>` / `http-equiv` declaration in
//! the first 1,024 bytes, then UTF-8 if the bytes are valid UTF-8, else a statistical guess
//! (`chardetng`). Decoding never fails: invalid sequences become U+FFFD.

use std::sync::OnceLock;

use encoding_rs::Encoding;
use regex::bytes::Regex;

/// The `charset` parameter of a `Content-Type` value.
pub fn charset_param(content_type: &str) -> Option<&str> {
    content_type.split(';').skip(1).find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches(|c| c == '"' || c == '\''))
    })
}

/// A `<meta charset=…>` or `<meta http-equiv=Content-Type content="…; charset=…">` in the
/// prescan window (HTML's encoding sniffing looks at the first 1,024 bytes).
fn meta_charset(head: &[u8]) -> Option<&'static Encoding> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    let re = RE
        .get_or_init(|| {
            Regex::new(r#"(?i-u)<meta[^>]*?charset\s*=\s*["']?\s*([a-z0-9_:.\-]+)"#).ok()
        })
        .as_ref()?;
    let label = re.captures(head)?.get(1)?.as_bytes();
    let enc = Encoding::for_label(label)?;
    // A page declaring UTF-16 in ASCII-compatible bytes is really UTF-8 (HTML spec).
    Some(
        if enc == encoding_rs::UTF_16LE || enc == encoding_rs::UTF_16BE {
            encoding_rs::UTF_8
        } else {
            enc
        },
    )
}

/// The encoding of `bytes` served with `content_type`; `html` enables the `<meta>` prescan.
pub fn detect(bytes: &[u8], content_type: Option<&str>, html: bool) -> &'static Encoding {
    if let Some((enc, _)) = Encoding::for_bom(bytes) {
        return enc;
    }
    if let Some(enc) = content_type
        .and_then(charset_param)
        .and_then(|l| Encoding::for_label(l.as_bytes()))
    {
        return enc;
    }
    if html {
        if let Some(enc) = meta_charset(&bytes[..bytes.len().min(1024)]) {
            return enc;
        }
    }
    if std::str::from_utf8(bytes).is_ok() {
        return encoding_rs::UTF_8;
    }
    let mut det = chardetng::EncodingDetector::new(chardetng::Iso2022JpDetection::Deny);
    det.feed(bytes, true);
    det.guess(None, chardetng::Utf8Detection::Allow)
}

/// Decode `bytes` (see the module documentation).
pub fn decode(bytes: &[u8], content_type: Option<&str>, html: bool) -> String {
    let enc = detect(bytes, content_type, html);
    let (text, _, _) = enc.decode(bytes);
    text.into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn charset_sources_in_order() {
        assert_eq!(
            charset_param("text/html; charset=\"Shift_JIS\""),
            Some("Shift_JIS")
        );
        assert_eq!(charset_param("text/html"), None);
        let latin = b"<meta charset=iso-8859-1><p>caf\xe9</p>";
        assert_eq!(
            decode(latin, Some("text/html"), true),
            "<meta charset=iso-8859-1><p>café</p>"
        );
        // The header wins over the meta tag, the BOM over both.
        let koi = b"<meta charset=utf-8>\xf0\xd2\xc9\xd7\xc5\xd4";
        assert_eq!(
            detect(koi, Some("text/html; charset=koi8-r"), true).name(),
            "KOI8-R"
        );
        let bom = b"\xef\xbb\xbfhi";
        assert_eq!(
            detect(bom, Some("text/html; charset=koi8-r"), true),
            encoding_rs::UTF_8
        );
        let http_equiv =
            b"<meta http-equiv=\"Content-Type\" content=\"text/html; charset=windows-1251\">";
        assert_eq!(detect(http_equiv, None, true).name(), "windows-1251");
        // The meta prescan is for HTML only.
        assert_eq!(detect(http_equiv, None, false), encoding_rs::UTF_8);
    }

    #[test]
    fn undeclared_legacy_text_is_guessed() {
        let (bytes, _, _) = encoding_rs::SHIFT_JIS
            .encode("日本語のページです。天気は晴れ、気温は二十度でした。明日も晴れるでしょう。");
        assert_eq!(detect(&bytes, None, true), encoding_rs::SHIFT_JIS);
    }
}
