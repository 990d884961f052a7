//! Document → Markdown conversion for uploads (spec 50 §7.5): PDF (`pdf-extract`), Excel
//! `.xlsx`/`.xls` (`calamine`), Word `.docx` and PowerPoint `.pptx` (their XML read with `zip` +
//! `quick-xml`). Legacy binary `.doc`/`.ppt` have no maintained Rust reader and are reported as
//! unsupported.

use std::path::Path;

/// Extensions DeerFlow converts.
pub const CONVERTIBLE: &[&str] = &["pdf", "ppt", "pptx", "xls", "xlsx", "doc", "docx"];

/// Extensions a converter exists for.
const CONVERTERS: &[&str] = &["pdf", "xlsx", "xls", "xlsm", "xlsb", "ods", "docx", "pptx"];

/// Rows kept per spreadsheet sheet.
#[cfg(feature = "documents")]
const MAX_SHEET_ROWS: usize = 2_000;

/// Why a document was not converted.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// No converter exists for this format.
    #[error("conversion of .{0} files to Markdown is not supported")]
    Unsupported(String),
    /// The converter failed on this file.
    #[error("could not convert {file} to Markdown: {reason}")]
    Failed { file: String, reason: String },
}

/// Whether DeerFlow would try to convert a file with this name.
pub fn is_convertible(name: &str) -> bool {
    extension(name).is_some_and(|e| CONVERTIBLE.contains(&e.as_str()))
}

fn extension(name: &str) -> Option<String> {
    Path::new(name)
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
}

/// Convert `path` (named `name`) to Markdown.
pub fn to_markdown(path: &Path, name: &str) -> Result<String, ConvertError> {
    let file = std::fs::File::open(path).map_err(|e| ConvertError::Failed {
        file: name.to_owned(),
        reason: e.to_string(),
    })?;
    to_markdown_from(file, name)
}

/// Convert an open file (named `name`) to Markdown. Callers holding a thread folder's handle
/// open the document through it, so conversion never reads through a swapped folder.
pub fn to_markdown_from(mut file: std::fs::File, name: &str) -> Result<String, ConvertError> {
    use std::io::Read;
    let ext = extension(name).unwrap_or_default();
    let fail = |reason: String| ConvertError::Failed {
        file: name.to_owned(),
        reason,
    };
    if !cfg!(feature = "documents") || !CONVERTERS.contains(&ext.as_str()) {
        return Err(ConvertError::Unsupported(ext));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    to_markdown_bytes(bytes, &ext).map_err(|e| match e {
        None => ConvertError::Unsupported(ext.clone()),
        Some(reason) => fail(reason),
    })
}

/// `Err(None)`: no converter for `ext`; `Err(Some(reason))`: the converter failed.
#[cfg(feature = "documents")]
fn to_markdown_bytes(bytes: Vec<u8>, ext: &str) -> Result<String, Option<String>> {
    let ext2 = ext.to_owned();
    // Parsers of untrusted documents may panic; contain that to this file.
    let res = std::panic::catch_unwind(move || match ext2.as_str() {
        "pdf" => pdf(&bytes).map_err(Some),
        "xlsx" | "xls" | "xlsm" | "xlsb" | "ods" => spreadsheet(bytes).map_err(Some),
        "docx" => docx(&bytes).map_err(Some),
        "pptx" => pptx(&bytes).map_err(Some),
        _ => Err(None),
    });
    match res {
        Ok(r) => r,
        Err(_) => Err(Some("the converter crashed on this file".to_owned())),
    }
}

#[cfg(not(feature = "documents"))]
fn to_markdown_bytes(_bytes: Vec<u8>, _ext: &str) -> Result<String, Option<String>> {
    Err(None)
}

#[cfg(feature = "documents")]
fn pdf(bytes: &[u8]) -> Result<String, String> {
    let pages = pdf_extract::extract_text_from_mem_by_pages(bytes).map_err(|e| e.to_string())?;
    let mut md = String::new();
    for (i, page) in pages.iter().enumerate() {
        let text = page.trim();
        if text.is_empty() {
            continue;
        }
        md.push_str(&format!("## Page {}\n\n{}\n\n", i + 1, text));
    }
    if md.trim().is_empty() {
        return Err("no extractable text (the PDF may be scanned images)".to_owned());
    }
    Ok(md)
}

#[cfg(feature = "documents")]
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

#[cfg(feature = "documents")]
fn spreadsheet(bytes: Vec<u8>) -> Result<String, String> {
    use calamine::{open_workbook_auto_from_rs, Reader};
    let mut wb =
        open_workbook_auto_from_rs(std::io::Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let mut md = String::new();
    for name in wb.sheet_names() {
        let range = wb.worksheet_range(&name).map_err(|e| e.to_string())?;
        md.push_str(&format!("## Sheet: {name}\n\n"));
        let mut rows = range.rows();
        let Some(header) = rows.next() else {
            md.push_str("(empty sheet)\n\n");
            continue;
        };
        let width = header.len().max(1);
        let line = |cells: &[calamine::Data]| {
            let mut v: Vec<String> = cells.iter().map(|c| cell(&c.to_string())).collect();
            v.resize(width, String::new());
            format!("| {} |\n", v.join(" | "))
        };
        md.push_str(&line(header));
        md.push_str(&format!("|{}\n", " --- |".repeat(width)));
        for (n, r) in rows.enumerate() {
            if n == MAX_SHEET_ROWS {
                md.push_str(&format!(
                    "\n(showing the first {MAX_SHEET_ROWS} rows of {})\n",
                    range.height().saturating_sub(1)
                ));
                break;
            }
            md.push_str(&line(r));
        }
        md.push('\n');
    }
    Ok(md)
}

#[cfg(feature = "documents")]
fn zip_entry(bytes: &[u8], name: &str) -> Result<String, String> {
    use std::io::Read;
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let mut entry = z.by_name(name).map_err(|e| format!("{name}: {e}"))?;
    let mut s = String::new();
    entry.read_to_string(&mut s).map_err(|e| e.to_string())?;
    Ok(s)
}

#[cfg(feature = "documents")]
fn attr(e: &quick_xml::events::BytesStart<'_>, key: &[u8]) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.as_ref() == key)
        .map(|a| String::from_utf8_lossy(&a.value).into_owned())
}

/// Word: paragraphs (headings from `Heading N`/`Title` styles, list items) and tables.
#[cfg(feature = "documents")]
fn docx(bytes: &[u8]) -> Result<String, String> {
    use quick_xml::events::Event;
    let xml = zip_entry(bytes, "word/document.xml")?;
    let mut reader = quick_xml::Reader::from_str(&xml);
    let mut md = String::new();
    let mut para = String::new();
    let mut style: Option<String> = None;
    let mut list = false;
    let mut in_text = false;
    let mut table_depth = 0usize;
    let mut row: Vec<String> = Vec::new();
    let mut cell_text = String::new();
    let mut rows_done = 0usize;
    loop {
        match reader.read_event().map_err(|e| e.to_string())? {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"w:p" => {
                    para.clear();
                    style = None;
                    list = false;
                }
                b"w:pStyle" => style = attr(&e, b"w:val"),
                b"w:numPr" => list = true,
                b"w:t" => in_text = true,
                b"w:tab" => para.push('\t'),
                b"w:br" => para.push('\n'),
                b"w:tbl" => {
                    if table_depth == 0 && !md.is_empty() && !md.ends_with("\n\n") {
                        md.push('\n');
                    }
                    table_depth += 1;
                    rows_done = 0;
                }
                b"w:tr" => row.clear(),
                b"w:tc" => cell_text.clear(),
                _ => {}
            },
            Event::Text(t) if in_text => {
                para.push_str(&t.unescape().map_err(|e| e.to_string())?);
            }
            Event::End(e) => match e.name().as_ref() {
                b"w:t" => in_text = false,
                b"w:p" => {
                    let text = para.trim();
                    if table_depth > 0 {
                        if !cell_text.is_empty() && !text.is_empty() {
                            cell_text.push(' ');
                        }
                        cell_text.push_str(text);
                    } else if !text.is_empty() {
                        let level = style.as_deref().and_then(|s| {
                            let s = s.to_ascii_lowercase();
                            if s == "title" {
                                Some(1)
                            } else {
                                s.strip_prefix("heading")
                                    .and_then(|n| n.trim().parse::<usize>().ok())
                            }
                        });
                        match level {
                            Some(l) => {
                                md.push_str(&format!("{} {text}\n\n", "#".repeat(l.clamp(1, 6))))
                            }
                            None if list => md.push_str(&format!("- {text}\n")),
                            None => md.push_str(&format!("{text}\n\n")),
                        }
                    }
                }
                b"w:tc" => row.push(cell(cell_text.trim())),
                b"w:tr" => {
                    md.push_str(&format!("| {} |\n", row.join(" | ")));
                    if rows_done == 0 {
                        md.push_str(&format!("|{}\n", " --- |".repeat(row.len().max(1))));
                    }
                    rows_done += 1;
                }
                b"w:tbl" => {
                    table_depth = table_depth.saturating_sub(1);
                    md.push('\n');
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(md)
}

/// PowerPoint: one `## Slide N` section per slide with its text paragraphs.
#[cfg(feature = "documents")]
fn pptx(bytes: &[u8]) -> Result<String, String> {
    use quick_xml::events::Event;
    let z = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| e.to_string())?;
    let mut slides: Vec<(u32, String)> = z
        .file_names()
        .filter_map(|n| {
            let num = n.strip_prefix("ppt/slides/slide")?.strip_suffix(".xml")?;
            Some((num.parse().ok()?, n.to_owned()))
        })
        .collect();
    slides.sort();
    let mut md = String::new();
    for (num, name) in slides {
        let xml = zip_entry(bytes, &name)?;
        let mut reader = quick_xml::Reader::from_str(&xml);
        let mut paras: Vec<String> = Vec::new();
        let mut para = String::new();
        let mut in_text = false;
        loop {
            match reader.read_event().map_err(|e| e.to_string())? {
                Event::Start(e) if e.name().as_ref() == b"a:t" => in_text = true,
                Event::Start(e) if e.name().as_ref() == b"a:p" => para.clear(),
                Event::Text(t) if in_text => {
                    para.push_str(&t.unescape().map_err(|e| e.to_string())?)
                }
                Event::End(e) if e.name().as_ref() == b"a:t" => in_text = false,
                Event::End(e) if e.name().as_ref() == b"a:p" => {
                    let t = para.trim();
                    if !t.is_empty() {
                        paras.push(t.to_owned());
                    }
                }
                Event::Eof => break,
                _ => {}
            }
        }
        md.push_str(&format!("## Slide {num}\n\n"));
        for p in paras {
            md.push_str(&p);
            md.push_str("\n\n");
        }
    }
    if md.is_empty() {
        return Err("no slides found".to_owned());
    }
    Ok(md)
}
