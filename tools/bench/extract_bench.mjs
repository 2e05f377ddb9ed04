// extract_bench.mjs - what session_extract_text costs over pdftotext run directly on the
// same file. A 50-page text PDF (Flate-compressed pages of ~2.5 KB of text each, made by
// tests/client/pdfgen.mjs) is written into a session once; then N rounds, interleaved:
// session_extract_text of it (sandboxed pdftotext, store copy, checkpoint commit, MCP
// round trip) and `pdftotext -enc UTF-8 FILE -` on the host with the output read through
// a pipe; and, to show where the rest goes, pdftotext in a bare bwrap (the cost of any
// sandbox here) and session_write_files of a 120 KB text (the
// checkpoint commit and the MCP round trip without the sandbox). Prints the medians and
// the ratio (target <= 1.3). Nothing asserts on speed.
//   node tools/bench/extract_bench.mjs [N]   (DRUN_BUILD names the build directory)
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RawServer, BUILD } from '../../tests/client/lib.mjs';
import { makePdf } from '../../tests/client/pdfgen.mjs';

const N = Math.max(3, Number(process.argv[2] || 30));
const tmp = mkdtempSync(join(tmpdir(), 'drun-extract-bench-'));
// A root daemon's parser runs as the sandbox user, who must pass through to its copy.
chmodSync(tmp, 0o711);
mkdirSync(join(tmp, 'xdg'), { mode: 0o711 });
const srv = new RawServer(join(BUILD, 'drun-mcp'), ['--db', join(tmp, 'b.db')], { XDG_RUNTIME_DIR: join(tmp, 'xdg') });
let id = 0;
async function tool(name, args) {
  const r = await srv.request({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name, arguments: args } });
  if (!r.result || r.result.isError) throw new Error(`${name}: ${JSON.stringify(r).slice(0, 300)}`);
  return JSON.parse(r.result.content[0].text);
}

const words = 'the quick brown fox jumps over the lazy dog while seven wizards quietly judge boxes'.split(' ');
const pages = [];
for (let p = 0; p < 50; p++) {
  const lines = [];
  for (let l = 0; l < 45; l++) {
    const w = [];
    for (let k = 0; k < 10; k++) w.push(words[(p * 7 + l * 3 + k) % words.length]);
    lines.push(`${p + 1}.${l + 1} ${w.join(' ')}`);
  }
  pages.push(lines.join('\n'));
}
const pdf = makePdf(pages, { flate: true });
const file = join(tmp, 'doc.pdf');
writeFileSync(file, pdf);

// pdftotext in a bare bwrap (system directories, the file's directory read-only, new
// namespaces, nothing of drun's): what any sandbox costs on this machine, for reference.
const bare = ['--unshare-all', '--die-with-parent', '--new-session', '--ro-bind', '/usr', '/usr',
  '--symlink', 'usr/bin', '/bin', '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64',
  '--ro-bind', '/etc', '/etc', '--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp',
  '--ro-bind', tmp, '/workspace', '--chdir', '/workspace', 'pdftotext', '-enc', 'UTF-8', 'doc.pdf', '-'];
function direct(inBwrap) {
  return new Promise((res, rej) => {
    const p = inBwrap
      ? spawn('bwrap', bare, { stdio: ['ignore', 'pipe', 'ignore'] })
      : spawn('pdftotext', ['-enc', 'UTF-8', file, '-'], { stdio: ['ignore', 'pipe', 'ignore'] });
    let n = 0;
    p.stdout.on('data', (d) => (n += d.length));
    p.on('exit', (c) => (c === 0 ? res(n) : rej(new Error(`pdftotext exit ${c}`))));
  });
}

await srv.initialize();
const sid = (await tool('create_session', {})).session_id;
await tool('session_write_files', { entries: [{ path: 'doc.pdf', content: pdf.toString('base64'), is_base64: true }], description: 'bench', session_id: sid });
const now = () => Number(process.hrtime.bigint()) / 1e6;
const t = { tool: [], raw: [], bwrap: [], write: [] };
const text = 'x'.repeat(120000);
let pagesSeen = 0;
for (let i = 0; i < N + 2; i++) {
  let a = now();
  const r = await tool('session_extract_text', { path: 'doc.pdf', save_to: `out${i % 2}.txt`, description: 'bench', session_id: sid });
  const dt = now() - a;
  a = now();
  await direct();
  const dr = now() - a;
  a = now();
  await direct(true);
  const db = now() - a;
  // The part that is not the parser: a checkpoint of a text file the size of the output.
  a = now();
  await tool('session_write_files', { entries: [{ path: `w${i % 2}.txt`, content: text + i }], description: 'bench', session_id: sid });
  const dw = now() - a;
  pagesSeen = r.pages;
  if (i >= 2) {
    t.tool.push(dt);
    t.raw.push(dr);
    t.bwrap.push(db);
    t.write.push(dw);
  }
}
const med = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1];
const mt = med(t.tool), mr = med(t.raw);
console.log(`extract_bench: ${N} rounds, 50-page PDF of ${pdf.length} bytes, ${pagesSeen} pages extracted`);
console.log(`  session_extract_text p50 ${mt.toFixed(1)} ms`);
console.log(`  pdftotext direct     p50 ${mr.toFixed(1)} ms`);
console.log(`  pdftotext in a bare bwrap p50 ${med(t.bwrap).toFixed(1)} ms (ratio ${(med(t.bwrap) / mr).toFixed(2)})`);
console.log(`  session_write_files of 120 KB (commit + round trip) p50 ${med(t.write).toFixed(1)} ms`);
console.log(`  ratio ${(mt / mr).toFixed(2)} (target <= 1.3)`);
srv.close?.();
rmSync(tmp, { recursive: true, force: true });
process.exit(0);
