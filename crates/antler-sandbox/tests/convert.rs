//! Document → Markdown conversion on real (minimal, generated) files.
#![cfg(feature = "documents")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;

use antler_sandbox::convert::{to_markdown, ConvertError};
use antler_sandbox::{attach_files, ThreadPaths, UploadSettings};

fn zip_file(path: &Path, entries: &[(&str, &str)]) {
    let f = std::fs::File::create(path).unwrap();
    let mut z = zip::ZipWriter::new(f);
    let opts = zip::write::SimpleFileOptions::default();
    for (name, body) in entries {
        z.start_file(*name, opts).unwrap();
        z.write_all(body.as_bytes()).unwrap();
    }
    z.finish().unwrap();
}

fn docx(path: &Path) {
    let doc = r#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>
<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>Quarterly Report</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">Revenue grew </w:t></w:r><w:r><w:t>12%.</w:t></w:r></w:p>
<w:p><w:pPr><w:numPr><w:ilvl w:val="0"/></w:numPr></w:pPr><w:r><w:t>First point</w:t></w:r></w:p>
<w:tbl><w:tr><w:tc><w:p><w:r><w:t>Region</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>Sales</w:t></w:r></w:p></w:tc></w:tr>
<w:tr><w:tc><w:p><w:r><w:t>EU</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>10</w:t></w:r></w:p></w:tc></w:tr></w:tbl>
</w:body></w:document>"#;
    zip_file(path, &[("word/document.xml", doc)]);
}

fn pptx(path: &Path) {
    let slide = |t: &str| {
        format!(
            r#"<p:sld xmlns:p="p" xmlns:a="a"><p:cSld><p:spTree><p:sp><p:txBody><a:p><a:r><a:t>{t}</a:t></a:r></a:p></p:txBody></p:sp></p:spTree></p:cSld></p:sld>"#
        )
    };
    let (s1, s2, s10) = (slide("Intro"), slide("Second"), slide("Tenth"));
    zip_file(
        path,
        &[
            ("ppt/slides/slide10.xml", &s10),
            ("ppt/slides/slide2.xml", &s2),
            ("ppt/slides/slide1.xml", &s1),
        ],
    );
}

fn xlsx(path: &Path) {
    let ct = r#"<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/></Types>"#;
    let rels = r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="xl/workbook.xml"/></Relationships>"#;
    let wb = r#"<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="Data" sheetId="1" r:id="rId1"/></sheets></workbook>"#;
    let wbrels = r#"<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>"#;
    let sheet = r#"<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>name</t></is></c><c r="B1" t="inlineStr"><is><t>qty</t></is></c></row><row r="2"><c r="A2" t="inlineStr"><is><t>apple|pie</t></is></c><c r="B2"><v>3</v></c></row></sheetData></worksheet>"#;
    zip_file(
        path,
        &[
            ("[Content_Types].xml", ct),
            ("_rels/.rels", rels),
            ("xl/workbook.xml", wb),
            ("xl/_rels/workbook.xml.rels", wbrels),
            ("xl/worksheets/sheet1.xml", sheet),
        ],
    );
}

/// A one-page PDF with a Helvetica text line, xref offsets computed.
fn pdf(path: &Path, text: &str) {
    let stream = format!("BT /F1 24 Tf 72 720 Td ({text}) Tj ET");
    let objs = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>".to_owned(),
        format!("<< /Length {} >>\nstream\n{stream}\nendstream", stream.len()),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>".to_owned(),
    ];
    let mut out = String::from("%PDF-1.4\n");
    let mut offsets = Vec::new();
    for (i, o) in objs.iter().enumerate() {
        offsets.push(out.len());
        out.push_str(&format!("{} 0 obj\n{o}\nendobj\n", i + 1));
    }
    let xref = out.len();
    out.push_str(&format!(
        "xref\n0 {}\n0000000000 65535 f \n",
        objs.len() + 1
    ));
    for off in offsets {
        out.push_str(&format!("{off:010} 00000 n \n"));
    }
    out.push_str(&format!(
        "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
        objs.len() + 1
    ));
    std::fs::write(path, out).unwrap();
}

/// The Markdown of a document named `name` that `make` writes.
fn converted(name: &str, make: impl FnOnce(&Path)) -> String {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join(name);
    make(&p);
    to_markdown(&p, name).unwrap()
}

#[test]
fn word_documents_become_markdown() {
    assert_eq!(converted("r.docx", docx), "# Quarterly Report\n\nRevenue grew 12%.\n\n- First point\n\n| Region | Sales |\n| --- | --- |\n| EU | 10 |\n\n");
}

#[test]
fn slides_become_sections_in_order() {
    assert_eq!(
        converted("d.pptx", pptx),
        "## Slide 1\n\nIntro\n\n## Slide 2\n\nSecond\n\n## Slide 10\n\nTenth\n\n"
    );
}

#[test]
fn spreadsheets_become_tables() {
    assert_eq!(
        converted("s.xlsx", xlsx),
        "## Sheet: Data\n\n| name | qty |\n| --- | --- |\n| apple\\|pie | 3 |\n\n"
    );
}

#[test]
fn pdf_text_is_extracted_per_page() {
    let md = converted("p.pdf", |p| pdf(p, "Hello antler PDF"));
    assert!(md.starts_with("## Page 1\n\n"), "{md}");
    assert!(md.contains("Hello antler PDF"), "{md}");
}

#[test]
fn broken_and_legacy_documents_are_reported() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("bad.pdf");
    std::fs::write(&p, "not a pdf").unwrap();
    assert!(matches!(
        to_markdown(&p, "bad.pdf"),
        Err(ConvertError::Failed { .. })
    ));
    let p = t.path().join("old.ppt");
    std::fs::write(&p, "x").unwrap();
    assert_eq!(
        to_markdown(&p, "old.ppt").unwrap_err().to_string(),
        "conversion of .ppt files to Markdown is not supported"
    );
}

#[test]
fn attach_writes_markdown_companions() {
    let home = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    docx(&src.path().join("report.docx"));
    std::fs::write(src.path().join("report.md"), "user's own notes").unwrap();
    let t = ThreadPaths::new(home.path(), "t1", None).unwrap();
    let s = UploadSettings {
        auto_convert_documents: true,
        ..Default::default()
    };
    let files = attach_files(
        &[src.path().join("report.md"), src.path().join("report.docx")],
        &t,
        &s,
    )
    .unwrap();
    // The companion never clobbers the user's own report.md.
    assert_eq!(files[1].markdown_file.as_deref(), Some("report_1.md"));
    assert_eq!(
        files[1].markdown_path.as_deref(),
        Some("/mnt/user-data/uploads/report_1.md")
    );
    assert_eq!(
        std::fs::read_to_string(t.uploads.join("report.md")).unwrap(),
        "user's own notes"
    );
    assert!(std::fs::read_to_string(t.uploads.join("report_1.md"))
        .unwrap()
        .starts_with("# Quarterly Report"));
    // Conversion is off by default (DeerFlow's uploads.auto_convert_documents: false).
    let t2 = ThreadPaths::new(home.path(), "t2", None).unwrap();
    let files = attach_files(
        &[src.path().join("report.docx")],
        &t2,
        &UploadSettings::default(),
    )
    .unwrap();
    assert!(files[0].markdown_file.is_none() && files[0].note.is_none());
}
