// pdfgen.mjs - a small PDF writer for the extraction tests and benchmark: pages of text
// in Helvetica with WinAnsiEncoding (so Latin-1 letters such as ü and é map to Unicode),
// content streams plain or Flate-compressed, a correct xref table. Also the raw pieces
// the hostile files are built from.
import { deflateSync } from 'node:zlib';

// Escapes a PDF literal string; chars U+0000..U+00FF become single WinAnsi bytes.
function lit(s) {
  return '(' + s.replace(/[\\()]/g, (c) => '\\' + c) + ')';
}

// Assembles objects (Buffers or strings, numbered from 1) into a PDF with an xref.
export function assemble(objs, { root = 1, trailerExtra = '' } = {}) {
  const parts = [Buffer.from('%PDF-1.4\n%\xe2\xe3\xcf\xd3\n', 'latin1')];
  let off = parts[0].length;
  const offsets = [];
  objs.forEach((o, i) => {
    const b = Buffer.concat([
      Buffer.from(`${i + 1} 0 obj\n`, 'latin1'),
      Buffer.isBuffer(o) ? o : Buffer.from(o, 'latin1'),
      Buffer.from('\nendobj\n', 'latin1'),
    ]);
    offsets.push(off);
    parts.push(b);
    off += b.length;
  });
  let xref = `xref\n0 ${objs.length + 1}\n0000000000 65535 f \n`;
  for (const o of offsets) xref += `${String(o).padStart(10, '0')} 00000 n \n`;
  xref += `trailer\n<< /Size ${objs.length + 1} /Root ${root} 0 R ${trailerExtra}>>\nstartxref\n${off}\n%%EOF\n`;
  parts.push(Buffer.from(xref, 'latin1'));
  return Buffer.concat(parts);
}

// A stream object with `data` (Buffer), compressed with Flate when `flate`.
export function stream(data, flate, dict = '') {
  const body = flate ? deflateSync(data) : data;
  return Buffer.concat([
    Buffer.from(`<< /Length ${body.length}${flate ? ' /Filter /FlateDecode' : ''} ${dict}>>\nstream\n`, 'latin1'),
    body,
    Buffer.from('\nendstream', 'latin1'),
  ]);
}

// The content stream of one page: each line of `text` on its own line of the page.
export function pageContent(text) {
  let c = 'BT /F1 12 Tf 14 TL 72 740 Td\n';
  for (const line of text.split('\n')) c += `${lit(line)} Tj T*\n`;
  return Buffer.from(c + 'ET\n', 'latin1');
}

// A PDF whose pages hold the given texts (Latin-1 only). opts.flate compresses them.
export function makePdf(pages, { flate = false } = {}) {
  const n = pages.length;
  const kids = pages.map((_, i) => `${4 + 2 * i} 0 R`).join(' ');
  const objs = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    `<< /Type /Pages /Kids [${kids}] /Count ${n} >>`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>',
  ];
  pages.forEach((t, i) => {
    objs.push(
      `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents ${5 + 2 * i} 0 R >>`,
    );
    objs.push(stream(pageContent(t), flate));
  });
  return assemble(objs);
}

// One page whose content stream is `content` (a Buffer), optionally compressed.
export function onePage(content, flate) {
  return assemble([
    '<< /Type /Catalog /Pages 2 0 R >>',
    '<< /Type /Pages /Kids [4 0 R] /Count 1 >>',
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>',
    '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>',
    stream(content, flate),
  ]);
}
