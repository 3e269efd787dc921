// The console's shell: the header (screens, token, version), and the screen of the URL hash,
// mounted again whenever the hash changes (every view is a URL).

import { getText, parseMetrics, setToken, token } from './api.js';
import { route } from './ui.js';
import * as explore from './explore.js';
import * as live from './live.js';
import * as rollups from './rollups.js';
import * as alerts from './alerts.js';
import * as health from './health.js';

const SCREENS = { explore, live, rollups, alerts, health };
const main = document.getElementById('main');
let unmount = null;

function show() {
  const { screen, params } = route();
  const mod = SCREENS[screen] || explore;
  if (unmount) {
    try {
      unmount();
    } catch (e) {
      console.error(e);
    }
  }
  main.replaceChildren();
  main.dataset.screen = screen;
  // Which view is mounted (a hash set a moment ago may not be yet).
  main.dataset.hash = location.hash;
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.dataset.screen === screen);
  }
  unmount = mod.mount(main, params) || null;
}

async function version() {
  try {
    const ms = parseMetrics(await getText('/metrics'));
    const b = ms.find((m) => m.name === 'sluice_build_info');
    document.getElementById('version').textContent = b ? 'v' + b.labels.version : '';
  } catch {
    document.getElementById('version').textContent = '';
  }
}

const form = document.getElementById('token-form');
const input = document.getElementById('token');
input.placeholder = token() ? 'token set (this tab)' : 'token (read)';
form.addEventListener('submit', (e) => {
  e.preventDefault();
  setToken(input.value);
  input.value = '';
  input.placeholder = token() ? 'token set (this tab)' : 'token (read)';
  version();
  show();
});

window.addEventListener('hashchange', show);
show();
version();
