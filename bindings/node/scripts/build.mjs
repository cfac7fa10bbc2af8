// Builds the native addon once (cargo) and puts it in @portcullis/core as
// portcullis.linux-x64-gnu.node. `--release` builds the optimised addon.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..');
const release = process.argv.includes('--release');
const args = ['build', '-p', 'portcullis-node', '-j', '2', '--message-format', 'short'];
if (release) args.push('--release');

const built = spawnSync('cargo', args, { cwd: root, stdio: 'inherit' });
if (built.status !== 0) process.exit(built.status ?? 1);

// Where cargo put the library: $CARGO_TARGET_DIR, else the workspace's target/.
const targetDir = process.env.CARGO_TARGET_DIR ?? path.resolve(root, '..', '..', 'target');
const library = path.join(targetDir, release ? 'release' : 'debug', 'libportcullis_node.so');
if (!existsSync(library)) {
  console.error(`build.mjs: cargo succeeded but ${library} is missing`);
  process.exit(1);
}
const addon = path.join(root, 'packages', 'core', 'portcullis.linux-x64-gnu.node');
copyFileSync(library, addon);
console.log(`build.mjs: ${path.relative(root, addon)} from ${library}`);
