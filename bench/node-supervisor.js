// A minimal Node.js supervisor, standing for the inline scripts agent hosts use today: spawn the
// child detached (its own process group), forward SIGTERM/SIGINT to that group, wait, exit with
// the child's status. It tracks nothing that leaves the group and has no owner watch.
'use strict';
const { spawn } = require('child_process');
const os = require('os');

const [cmd, ...args] = process.argv.slice(2);
const child = spawn(cmd, args, { detached: true, stdio: 'inherit' });
const forward = (sig) => {
  try {
    process.kill(-child.pid, sig);
  } catch (_) {
    // the group is already gone
  }
};
process.on('SIGTERM', () => forward('SIGTERM'));
process.on('SIGINT', () => forward('SIGINT'));
child.on('exit', (code, signal) => {
  process.exit(code !== null ? code : 128 + (os.constants.signals[signal] || 0));
});
