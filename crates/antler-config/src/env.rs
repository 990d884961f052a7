//! `$NAME` substitution (spec 60 §1.2): after parsing, every string value that starts with `$`
//! is replaced by the environment variable named by the rest of the string. Whole strings only:
//! no `${…}`, no embedded references, no defaults. Keys are never substituted.

use crate::yaml::Node;

/// A `$NAME` whose variable is not set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MissingVar {
    /// Key path of the value, e.g. `models[0].api_key`.
    pub key: String,
    /// Variable name.
    pub var: String,
}

/// Replaces `$NAME` strings throughout `value`, depth first, in document order.
pub(crate) fn substitute_env(
    value: &mut Node,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), MissingVar> {
    walk(value, &mut String::new(), env)
}

fn walk(
    value: &mut Node,
    path: &mut String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), MissingVar> {
    match value {
        Node::String(s) => {
            if let Some(var) = s.strip_prefix('$') {
                match env(var) {
                    Some(resolved) => *s = resolved,
                    None => {
                        return Err(MissingVar {
                            key: display_path(path),
                            var: var.to_owned(),
                        })
                    }
                }
            }
            Ok(())
        }
        Node::Seq(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                walk(item, path, env)?;
                path.truncate(len);
            }
            Ok(())
        }
        Node::Map(map) => {
            for (key, item) in map.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                walk(item, path, env)?;
                path.truncate(len);
            }
            Ok(())
        }
        Node::Null | Node::Bool(_) | Node::Int(_) | Node::UInt(_) | Node::Float(_) => Ok(()),
    }
}

fn display_path(path: &str) -> String {
    if path.is_empty() {
        "top level".to_owned()
    } else {
        path.to_owned()
    }
}
