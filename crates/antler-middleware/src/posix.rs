//! Lexical POSIX path helpers shared by the middlewares that match paths (not a middleware).

/// POSIX `normpath`: collapses `.`, `..` and repeated slashes lexically.
pub fn normalize_path(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posix_normpath() {
        assert_eq!(normalize_path("/a/../a/f"), "/a/f");
        assert_eq!(normalize_path("/a//b/./c"), "/a/b/c");
        assert_eq!(normalize_path("/../x"), "/x");
        assert_eq!(normalize_path("a/../../b"), "../b");
        assert_eq!(normalize_path(""), ".");
    }
}
