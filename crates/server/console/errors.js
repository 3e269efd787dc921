// Loaded first, as a classic script: records every JavaScript error, unhandled rejection,
// console.error, failed asset load and Content-Security-Policy violation of the page in
// `window.__consoleErrors` (read by the browser tests) and shows them in #js-errors.
(function () {
  var errors = (window.__consoleErrors = []);
  function note(kind, msg) {
    errors.push(kind + ': ' + msg);
    var box = document.getElementById('js-errors');
    if (box) {
      box.hidden = false;
      box.textContent = errors.slice(-5).join('\n');
    }
  }
  window.addEventListener('error', function (e) {
    if (e.target && e.target !== window && (e.target.src || e.target.href)) {
      note('load', e.target.src || e.target.href);
    } else {
      note('error', (e.message || String(e.error)) + ' at ' + e.filename + ':' + e.lineno);
    }
  }, true);
  window.addEventListener('unhandledrejection', function (e) {
    var r = e.reason;
    if (r && r.name === 'AbortError') return; // a cancelled request
    note('rejection', r && r.stack ? r.stack : String(r));
  });
  document.addEventListener('securitypolicyviolation', function (e) {
    note('csp', e.violatedDirective + ' ' + e.blockedURI);
  });
  var orig = console.error;
  console.error = function () {
    note('console', Array.prototype.map.call(arguments, String).join(' '));
    return orig.apply(console, arguments);
  };
})();
