// test_extract.mjs - session_extract_text against the real build/drun-mcp through the
// official SDK client, with real bwrap. The PDFs are made here (pdfgen.mjs):
//
// - one and several pages, plain and Flate-compressed content, WinAnsi letters that come
//   out as UTF-8; the text lands at <path>.txt (or save_to) in a new checkpoint, with
//   pages, chars and truncated in the result; first_page/last_page and layout;
// - hostile files: a decompression bomb (megabytes of text from a few KiB), deeply nested
//   arrays, a page tree that loops, a truncated file, a file that is not a PDF: each ends
//   in extraction_failed or a bounded result, the daemon keeps answering, and a failure
//   writes nothing (the checkpoint count is unchanged);
// - the limits: extract_max_mb cuts the text (truncated: true), extract_timeout_ms fails
//   the call naming the key, and nothing is written;
// - a long extraction leaves the daemon serving other sessions, and a cancel kills it
//   and writes nothing;
// - bad input: unsupported extension (and no extension, and .PDF), missing file, save_to
//   that is not a valid key or escapes the workspace, first_page > last_page, page 0.
//
// `node test_extract.mjs nobody` runs the daemon as uid 65534 (needs root).
// DRUN_SANDBOX_WARM is passed through: "off" runs pdftotext in a cold sandbox, "always" in
// one prepared on the spot (the warm path); run both.
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { MCP, Results, assert, assertEq, makeTmp } from './lib.mjs';
import { assemble, makePdf, onePage, stream } from './pdfgen.mjs';

const R = new Results();
if (!existsSync(MCP)) {
  R.fail('binaries', `'${MCP}' is missing; run 'make' first`);
  R.done();
}
try {
  execFileSync('bwrap', ['--unshare-all', '--ro-bind', '/', '/', 'true'], { stdio: 'ignore' });
  execFileSync('pdftotext', ['-v'], { stdio: 'ignore' });
} catch (e) {
  console.log('skip test_extract: bwrap cannot create a sandbox here or pdftotext is missing');
  console.log('0 passed, 0 failed');
  process.exit(77);
}
const asNobody = process.argv[2] === 'nobody';
if (asNobody && process.getuid() !== 0) {
  console.log('skip test_extract nobody: needs root to start the daemon as nobody');
  console.log('0 passed, 0 failed');
  process.exit(77);
}
const HOLD = 120000; // hang guard only
const tmp = makeTmp();
chmodSync(tmp, 0o755);

async function daemon(name, cfg) {
  const dir = join(tmp, name);
  mkdirSync(dir, { mode: 0o755 });
  const cfgPath = join(dir, 'config.toml');
  writeFileSync(cfgPath, `runtime_dir = "${join(dir, 'rt')}"\n${cfg}`);
  let command = MCP;
  let args = ['--db', join(dir, 'd.db'), '--config', cfgPath];
  if (asNobody) {
    execFileSync('chown', ['-R', '65534:65534', dir]);
    args = ['--reuid=65534', '--regid=65534', '--clear-groups', MCP, ...args];
    command = 'setpriv';
  }
  const transport = new StdioClientTransport({
    command,
    args,
    env: { ...process.env, XDG_RUNTIME_DIR: join(dir, 'xdg'), HOME: dir },
    stderr: 'pipe',
  });
  let stderr = '';
  transport.stderr?.on('data', (x) => (stderr += x));
  const client = new Client({ name: 'drun-extract-test', version: '1.0' });
  await client.connect(transport);
  return { client, stderr: () => stderr, close: () => client.close() };
}

async function call(d, name, args) {
  const r = await d.client.callTool({ name, arguments: args }, undefined, { timeout: HOLD });
  const text = r.content?.[0]?.text;
  let v = text;
  try {
    v = JSON.parse(text);
  } catch {}
  return { isError: !!r.isError, v };
}
async function ok(d, name, args) {
  const r = await call(d, name, args);
  assert(!r.isError, `${name} failed: ${JSON.stringify(r.v).slice(0, 400)}`);
  return r.v;
}
async function fails(d, name, args, code, re) {
  const r = await call(d, name, args);
  assert(r.isError, `${name} ${JSON.stringify(args).slice(0, 200)} succeeded: ${JSON.stringify(r.v).slice(0, 300)}`);
  assertEq(r.v.code, code, `error code (${r.v.message})`);
  if (re) assert(re.test(r.v.message), `message '${r.v.message}' does not match ${re}`);
  return r.v;
}
const write = (d, sid, path, buf) =>
  ok(d, 'session_write_files', {
    entries: [{ path, content: Buffer.from(buf).toString('base64'), is_base64: true }],
    description: 't',
    session_id: sid,
  });
const extract = (d, sid, args) => call(d, 'session_extract_text', { description: 't', session_id: sid, ...args });
const readText = async (d, sid, path) => {
  const v = await ok(d, 'session_read_file', { path, description: 't', session_id: sid });
  return typeof v === 'string' ? v : v.content;
};
async function until(what, cond) {
  const end = Date.now() + 60000; // hang guard only
  for (;;) {
    if (await cond()) return;
    if (Date.now() > end) throw new Error(`waited 60 s for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
const count = async (d, sid) => (await ok(d, 'session_history', { description: 't', session_id: sid })).length;

const d = await daemon('main', 'extract_max_mb = 1\nextract_timeout_ms = 60000\n');
const sid = (await ok(d, 'create_session', {})).session_id;

await R.run('one page, WinAnsi letters come out as UTF-8', async () => {
  await write(d, sid, 'docs/one.pdf', makePdf(['Hello world\nGr\u00fc\u00dfe caf\u00e9']));
  const r = await extract(d, sid, { path: 'docs/one.pdf' });
  assert(!r.isError, JSON.stringify(r.v));
  assertEq(r.v.saved_to, 'docs/one.pdf.txt', 'saved_to');
  assertEq(r.v.pages, 1, 'pages');
  assertEq(r.v.truncated, false, 'truncated');
  const t = await readText(d, sid, 'docs/one.pdf.txt');
  assert(t.includes('Hello world') && t.includes('Gr\u00fc\u00dfe caf\u00e9'), `text: ${JSON.stringify(t)}`);
  assertEq(r.v.chars, [...t].length, 'chars');
  const h = await ok(d, 'session_history', { description: 't', session_id: sid });
  assertEq(h[h.length - 1].checkpoint_id ?? h[h.length - 1].id, r.v.checkpoint_id, 'checkpoint is the head');
});

await R.run('several compressed pages, save_to, page range, layout', async () => {
  const pages = [];
  for (let i = 1; i <= 5; i++) pages.push(`This is page number ${i}\nsecond line ${i}`);
  await write(d, sid, 'many.pdf', makePdf(pages, { flate: true }));
  let r = await extract(d, sid, { path: 'many.pdf', save_to: 'out/many.txt' });
  assert(!r.isError, JSON.stringify(r.v));
  assertEq([r.v.saved_to, r.v.pages], ['out/many.txt', 5], 'saved_to, pages');
  let t = await readText(d, sid, 'out/many.txt');
  for (let i = 1; i <= 5; i++) assert(t.includes(`This is page number ${i}`), `page ${i} missing`);
  r = await extract(d, sid, { path: 'many.pdf', save_to: 'range.txt', first_page: 2, last_page: 3, layout: true });
  assert(!r.isError, JSON.stringify(r.v));
  assertEq(r.v.pages, 2, 'pages of 2..3');
  t = await readText(d, sid, 'range.txt');
  assert(t.includes('page number 2') && t.includes('page number 3') && !t.includes('page number 1') && !t.includes('page number 4'), t);
  r = await extract(d, sid, { path: 'many.pdf', save_to: 'last.txt', first_page: 5 });
  assertEq(r.v.pages, 1, 'pages from 5');
});

await R.run('bad arguments: extension, missing file, save_to, page range', async () => {
  const before = await count(d, sid);
  await write(d, sid, 'notes.txt', 'x');
  await write(d, sid, 'README', 'x');
  await write(d, sid, 'UPPER.PDF', makePdf(['x']));
  const base = await count(d, sid);
  assert(base === before + 3, 'writes made checkpoints');
  await fails(d, 'session_extract_text', { path: 'notes.txt', description: 't', session_id: sid }, 'unsupported_extraction_format', /no text extractor for '\.txt' files/);
  await fails(d, 'session_extract_text', { path: 'README', description: 't', session_id: sid }, 'unsupported_extraction_format', /'\.\(no extension\)'/);
  await fails(d, 'session_extract_text', { path: 'UPPER.PDF', description: 't', session_id: sid }, 'unsupported_extraction_format');
  await fails(d, 'session_extract_text', { path: 'nope.pdf', description: 't', session_id: sid }, 'file_not_found');
  for (const bad of ['../x', '/etc/x.txt', 'a/../../x', '']) {
    await fails(d, 'session_extract_text', { path: 'docs/one.pdf', save_to: bad, description: 't', session_id: sid }, 'invalid_workspace_path');
  }
  await fails(d, 'session_extract_text', { path: 'many.pdf', first_page: 3, last_page: 2, description: 't', session_id: sid }, 'invalid_arguments');
  const r = await call(d, 'session_extract_text', { path: 'many.pdf', first_page: 0, description: 't', session_id: sid });
  assert(r.isError, 'first_page 0 accepted');
  assertEq(await count(d, sid), base, 'checkpoints after refusals');
});

// Each hostile file: extraction_failed, or a result bounded by extract_max_mb; never a
// checkpoint for a failure, and the daemon answers the next call.
async function hostile(name, bytes, allowOk) {
  await write(d, sid, `${name}.pdf`, bytes);
  const before = await count(d, sid);
  const r = await extract(d, sid, { path: `${name}.pdf` });
  if (r.isError) {
    assertEq(r.v.code, 'extraction_failed', `code (${r.v.message})`);
    assert(r.v.message.startsWith(`failed to extract text from '${name}.pdf': `), r.v.message);
    assertEq(await count(d, sid), before, 'checkpoints after a failure');
  } else {
    assert(allowOk, `${name} extracted: ${JSON.stringify(r.v)}`);
    const t = await readText(d, sid, r.v.saved_to).catch(() => '');
    assert(Buffer.byteLength(t) <= 1 << 20, 'text over extract_max_mb');
  }
  await ok(d, 'get_session_state', { description: 't', session_id: sid });
  return r;
}

await R.run('hostile: not a PDF', async () => {
  const r = await hostile('plain', 'hello, this is not a PDF\n', false);
  assert(r.isError, 'not failed');
});
await R.run('hostile: truncated file', async () => {
  const full = makePdf(['truncated text here', 'and more'], { flate: true });
  await hostile('trunc', full.subarray(0, 40), false);
  await hostile('trunc2', full.subarray(0, full.length >> 1), true);
});
await R.run('hostile: decompression bomb (64 MiB of content from a small stream)', async () => {
  const pad = Buffer.alloc(64 << 20, 0x20);
  const content = Buffer.concat([Buffer.from('BT /F1 12 Tf 72 700 Td (bomb) Tj ET\n'), pad]);
  const pdf = onePage(content, true);
  assert(pdf.length < 1 << 20, 'bomb shape');
  await hostile('bomb', pdf, true);
});
await R.run('hostile: 4000 pages share one stream: the text is cut at extract_max_mb', async () => {
  let c = 'BT /F1 12 Tf 14 TL 40 760 Td\n';
  for (let i = 0; i < 50; i++) c += '(' + 'AB'.repeat(40) + ` ${i}) Tj T*\n`;
  const n = 4000;
  const objs = [
    '<< /Type /Catalog /Pages 2 0 R >>',
    `<< /Type /Pages /Kids [${Array.from({ length: n }, (_, i) => `${5 + i} 0 R`).join(' ')}] /Count ${n} >>`,
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>',
    stream(Buffer.from(c + 'ET\n'), true),
  ];
  for (let i = 0; i < n; i++) {
    objs.push('<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>');
  }
  const r = await hostile('amplify', assemble(objs), true);
  assert(!r.isError, `failed: ${JSON.stringify(r.v)}`);
  assertEq(r.v.truncated, true, 'truncated');
  assert(r.v.chars > 0 && r.v.chars <= 1 << 20, `chars ${r.v.chars}`);
  assert(r.v.pages > 0 && r.v.pages < n, `pages ${r.v.pages}`);
});
await R.run('hostile: deeply nested objects', async () => {
  const deep = '['.repeat(200000) + ']'.repeat(200000);
  const pdf = assemble([
    '<< /Type /Catalog /Pages 2 0 R /Deep 6 0 R >>',
    '<< /Type /Pages /Kids [4 0 R] /Count 1 >>',
    '<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>',
    '<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> /X ' + deep + ' >> /Contents 5 0 R >>',
    stream(Buffer.from('BT /F1 12 Tf 72 700 Td (deep) Tj ET'), false),
    deep,
  ]);
  await hostile('deep', pdf, true);
});
await R.run('hostile: reference loop', async () => {
  const pdf = assemble([
    '<< /Type /Catalog /Pages 2 0 R >>',
    '<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>',
    '<< /Type /Pages /Parent 2 0 R /Kids [3 0 R 2 0 R] /Count 2 /Length 4 0 R >>',
    '4 0 R',
  ]);
  await hostile('loop', pdf, true);
});

await R.run('extract_timeout_ms fails the call naming the key; nothing written', async () => {
  const t = await daemon('slow', 'extract_timeout_ms = 1\n');
  try {
    const s = (await ok(t, 'create_session', {})).session_id;
    await write(t, s, 'a.pdf', makePdf(['x']));
    const before = await count(t, s);
    const v = await fails(t, 'session_extract_text', { path: 'a.pdf', description: 't', session_id: s }, 'extraction_failed', /extract_timeout_ms = 1\b/);
    assert(!/undefined/.test(v.message), v.message);
    assertEq(await count(t, s), before, 'checkpoints');
    await ok(t, 'get_session_state', { description: 't', session_id: s });
  } finally {
    await t.close();
  }
});

await R.run('a long extraction runs beside other sessions and can be cancelled; nothing written', async () => {
  const q = await daemon('cancel', 'extract_timeout_ms = 600000\n');
  try {
    const a = (await ok(q, 'create_session', {})).session_id;
    const b = (await ok(q, 'create_session', {})).session_id;
    // 2,000 pages that share one stream of 64 MiB of blanks: minutes of parsing.
    const n = 2000;
    const objs = [
      '<< /Type /Catalog /Pages 2 0 R >>',
      `<< /Type /Pages /Kids [${Array.from({ length: n }, (_, i) => `${4 + i} 0 R`).join(' ')}] /Count ${n} >>`,
      stream(Buffer.concat([Buffer.from('BT ET\n'), Buffer.alloc(64 << 20, 0x20)]), true),
    ];
    for (let i = 0; i < n; i++) objs.push('<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R >>');
    await write(q, a, 'slow.pdf', assemble(objs));
    const before = await count(q, a);
    const ac = new AbortController();
    let aEnded = false;
    const pending = q.client
      .callTool({ name: 'session_extract_text', arguments: { path: 'slow.pdf', description: 't', session_id: a } }, undefined, { signal: ac.signal, timeout: HOLD })
      .then((r) => ({ r }), (err) => ({ err }))
      .finally(() => (aEnded = true));
    // The daemon answers session b while a's parser runs (a is busy, not the daemon).
    await until('session a busy', async () => (await call(q, 'get_session_state', { description: 't', session_id: a })).v?.code === 'session_busy');
    await ok(q, 'session_write_files', { entries: [{ path: 'x', content: 'y' }], description: 't', session_id: b });
    assert(!aEnded, 'the extraction ended before the other session was served');
    ac.abort();
    const out = await pending;
    assert(!out.r || out.r.isError, `not cancelled: ${JSON.stringify(out.r)}`);
    await until('session a free', async () => !(await call(q, 'get_session_state', { description: 't', session_id: a })).isError);
    assertEq(await count(q, a), before, 'checkpoints after a cancel');
  } finally {
    await q.close();
  }
});

await R.run('get_config and get_system_instructions name the tool and its keys', async () => {
  const c = await ok(d, 'get_config', {});
  const cfg = c.config ?? c;
  assertEq([cfg.extract_max_mb, cfg.extract_timeout_ms], [1, 60000], 'config keys');
  const r = await d.client.callTool({ name: 'get_system_instructions', arguments: {} });
  assert(/session_extract_text/.test(r.content[0].text), 'instructions do not mention session_extract_text');
});

await d.close();
R.done();
