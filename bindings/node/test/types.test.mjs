// The packages' .d.ts: the seed's quick start, with our names, type-checks (ESM and CommonJS).
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

test('the quick start type-checks against the packages with tsc --strict', () => {
  execFileSync(process.execPath, [path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', path.join(root, 'test', 'types')], {
    stdio: 'inherit',
  });
});
