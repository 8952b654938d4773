// <bookline-booking calendar="id" key="publishable key" api="https://bookline.example">
// <bookline-booking pool="id" key="publishable key">
// <bookline-booking calendars="a,b" key="publishable key">
//
// An embeddable booking widget for bookline: pick a day in a month view
// that marks the days with free times, see the bookable starts in your own
// time zone, choose one, give your name, hold it, confirm it, download it
// as .ics. Plain JavaScript without dependencies, served by bookline at
// /ui/bookline.js.
//
// Attributes: calendar, pool or calendars (one is required: a pool's page
// offers the times some calendar of the pool is free, holds on the
// calendar the pool chooses, confirms on that calendar and names it;
// calendars, 2 to 10 ids separated by commas, books one interval on all of
// them, offering the times all are free and naming them all); key (a
// publishable API key, listing every calendar of a pool or of calendars;
// none on an API without keys); api
// (bookline's base URL, default: where this script was loaded from); date
// (YYYY-MM-DD, the day to open on; default the first day with free times);
// timezone (the zone to show times in, default the visitor's); duration
// (minutes, default the calendar's first); hold-ttl (seconds a hold lasts,
// default 300 or the calendar's maximum if lower).
(() => {
  'use strict';
  if (window.customElements === undefined || customElements.get('bookline-booking')) {
    return;
  }

  // Captured now: document.currentScript is only set while the script runs.
  const scriptOrigin = (() => {
    try {
      return new URL(document.currentScript.src).origin;
    } catch (e) {
      return location.origin;
    }
  })();

  const CSS = `
bookline-booking { display: block; max-width: 34rem; margin: 0 auto; font: 16px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d232b; }
bookline-booking *, bookline-booking *::before, bookline-booking *::after { box-sizing: border-box; }
bookline-booking .bl { background: #fff; border: 1px solid #d5dbe3; border-radius: 12px; padding: 1.25rem; }
bookline-booking h2 { font-size: 1.35rem; margin: 0 0 .25rem; }
bookline-booking h3 { font-size: 1.05rem; margin: 1rem 0 .5rem; }
bookline-booking h2:focus, bookline-booking h3:focus { outline: none; }
bookline-booking .bl-sub { margin: 0 0 1rem; color: #4a5563; }
bookline-booking .bl-row { display: flex; flex-wrap: wrap; gap: .5rem; align-items: flex-end; margin-bottom: .75rem; }
bookline-booking label { display: block; font-weight: 600; font-size: .9rem; margin-bottom: .25rem; }
bookline-booking .bl-field { flex: 1 1 12rem; min-width: 0; }
bookline-booking input, bookline-booking select, bookline-booking textarea { width: 100%; font: inherit; font-size: 16px; padding: .55rem .6rem; border: 1px solid #9aa5b4; border-radius: 8px; background: #fff; color: inherit; }
bookline-booking textarea { min-height: 4.5rem; resize: vertical; }
bookline-booking button { font: inherit; min-height: 44px; padding: .5rem .9rem; border-radius: 8px; border: 1px solid #9aa5b4; background: #f4f6f9; color: #1d232b; cursor: pointer; }
bookline-booking button:hover { background: #e8ecf2; }
bookline-booking button:focus-visible, bookline-booking input:focus-visible, bookline-booking select:focus-visible, bookline-booking textarea:focus-visible, bookline-booking a:focus-visible { outline: 3px solid #2f6fde; outline-offset: 2px; }
bookline-booking button[disabled] { opacity: .55; cursor: default; }
bookline-booking .bl-primary { background: #1f5fc9; border-color: #1f5fc9; color: #fff; font-weight: 600; }
bookline-booking .bl-primary:hover { background: #194fa8; }
bookline-booking .bl-nav { flex: 0 0 auto; width: 44px; padding: 0; }
bookline-booking .bl-month-nav { display: flex; align-items: center; gap: .5rem; margin: .5rem 0; }
bookline-booking .bl-month-title { flex: 1 1 auto; margin: 0; text-align: center; }
bookline-booking .bl-cal { width: 100%; border-collapse: collapse; table-layout: fixed; margin-bottom: .5rem; }
bookline-booking .bl-cal th { padding: .2rem 0; font-size: .8rem; font-weight: 600; color: #4a5563; text-align: center; }
bookline-booking .bl-cal td { padding: 2px; text-align: center; }
bookline-booking .bl-cal-day { width: 100%; min-width: 0; padding: 0; border-color: transparent; background: transparent; font-variant-numeric: tabular-nums; }
bookline-booking .bl-cal-day.bl-free { border-color: #b9cff5; background: #eaf1fd; color: #1f5fc9; font-weight: 700; }
bookline-booking .bl-cal-day.bl-free:hover { background: #d6e4fb; }
bookline-booking .bl-cal-day.bl-off { color: #6b7482; cursor: default; }
bookline-booking .bl-cal-day.bl-off:hover { background: transparent; }
bookline-booking .bl-cal-day[aria-current="date"] { text-decoration: underline; text-underline-offset: 3px; }
bookline-booking .bl-cal-day.bl-sel, bookline-booking .bl-cal-day.bl-sel:hover { background: #1f5fc9; border-color: #1f5fc9; color: #fff; }
bookline-booking .bl-slots { list-style: none; margin: 0; padding: 0; display: grid; grid-template-columns: repeat(auto-fill, minmax(6rem, 1fr)); gap: .5rem; }
bookline-booking .bl-slot { width: 100%; white-space: nowrap; padding: .5rem .3rem; background: #fff; border-color: #1f5fc9; color: #1f5fc9; font-weight: 600; }
bookline-booking .bl-slot:hover { background: #eaf1fd; }
bookline-booking .bl-empty, bookline-booking .bl-muted { color: #4a5563; }
bookline-booking .bl-none { margin: .75rem 0; font-weight: 600; }
bookline-booking .bl-alert { border-radius: 8px; padding: .75rem .9rem; margin: 0 0 1rem; background: #fff4e5; border: 1px solid #e0a04a; }
bookline-booking .bl-alert.bl-bad { background: #fdecec; border-color: #d46a6a; }
bookline-booking .bl-alert p { margin: 0; }
bookline-booking .bl-alert button { margin-top: .5rem; }
bookline-booking .bl-actions { display: flex; flex-wrap: wrap; gap: .5rem; margin-top: 1rem; }
bookline-booking .bl-summary { font-size: 1.1rem; font-weight: 600; margin: .25rem 0; }
bookline-booking .bl-with { margin: .25rem 0; font-weight: 600; color: #1f5fc9; }
bookline-booking .bl-ics { display: inline-flex; align-items: center; min-height: 44px; padding: .5rem .9rem; border-radius: 8px; background: #1f5fc9; color: #fff; font-weight: 600; text-decoration: none; }
bookline-booking .bl-sr { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
bookline-booking [hidden] { display: none !important; }
@media (max-width: 480px) {
  bookline-booking .bl { border: 0; border-radius: 0; padding: 1rem .75rem; }
  bookline-booking .bl-actions button, bookline-booking .bl-ics { flex: 1 1 100%; justify-content: center; }
}
body.bl-page { margin: 0; padding: 1.5rem .5rem; background: #eef1f5; }
@media (max-width: 480px) { body.bl-page { padding: 0; background: #fff; } }
`;

  function injectStyle() {
    if (document.getElementById('bookline-booking-style')) {
      return;
    }
    const s = document.createElement('style');
    s.id = 'bookline-booking-style';
    s.textContent = CSS;
    (document.head || document.documentElement).appendChild(s);
  }

  // ---- time zones: wall-clock time through Intl, never offset arithmetic.

  const formatters = new Map();
  function partsFormatter(tz) {
    let f = formatters.get(tz);
    if (!f) {
      f = new Intl.DateTimeFormat('en-US', {
        timeZone: tz, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit',
        hour: '2-digit', minute: '2-digit', second: '2-digit',
      });
      formatters.set(tz, f);
    }
    return f;
  }

  // wall is the local date and time of instant t (ms) in zone tz.
  function wall(t, tz) {
    const p = {};
    for (const x of partsFormatter(tz).formatToParts(new Date(t))) {
      p[x.type] = x.value;
    }
    return { y: +p.year, m: +p.month, d: +p.day, h: +p.hour % 24, min: +p.minute, s: +p.second };
  }

  // offset is local wall time minus UTC at instant t in tz, in ms.
  function offset(t, tz) {
    const w = wall(t, tz);
    return Date.UTC(w.y, w.m - 1, w.d, w.h, w.min, w.s) - Math.floor(t / 1000) * 1000;
  }

  const pad = (n, w = 2) => String(n).padStart(w, '0');
  const ymd = (w) => `${pad(w.y, 4)}-${pad(w.m)}-${pad(w.d)}`;

  const nextMinute = () => Math.ceil(Date.now() / 60000) * 60000;
  const LONG_DATE = { weekday: 'long', day: 'numeric', month: 'long', year: 'numeric' };

  function parseDate(s) {
    const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s || '');
    return m ? { y: +m[1], m: +m[2], d: +m[3] } : null;
  }

  function addDays(date, n) {
    const u = new Date(Date.UTC(date.y, date.m - 1, date.d + n));
    return { y: u.getUTCFullYear(), m: u.getUTCMonth() + 1, d: u.getUTCDate() };
  }

  // Months are {y, m}; dates {y, m, d}; both compare as their strings.
  const ym = (mon) => `${pad(mon.y, 4)}-${pad(mon.m)}`;
  const monthOf = (date) => ({ y: date.y, m: date.m });

  function addMonths(mon, n) {
    const u = new Date(Date.UTC(mon.y, mon.m - 1 + n, 1));
    return { y: u.getUTCFullYear(), m: u.getUTCMonth() + 1 };
  }

  const daysIn = (mon) => new Date(Date.UTC(mon.y, mon.m, 0)).getUTCDate();
  const weekday = (date) => new Date(Date.UTC(date.y, date.m - 1, date.d)).getUTCDay(); // 0 Sunday

  // A date's own label, not an instant's: no zone can shift it.
  function dateLabel(date, opts) {
    return new Intl.DateTimeFormat(undefined, Object.assign({ timeZone: 'UTC' }, opts)).format(new Date(Date.UTC(date.y, date.m - 1, date.d)));
  }

  // firstWeekday is the locale's first day of the week (0 Sunday), Monday
  // where the browser does not say.
  function firstWeekday() {
    try {
      const loc = new Intl.Locale(navigator.language || 'en');
      const info = loc.getWeekInfo ? loc.getWeekInfo() : loc.weekInfo;
      if (info && info.firstDay) {
        return info.firstDay % 7;
      }
    } catch (e) {
      // an old browser: Monday
    }
    return 1;
  }

  // startOfDay is the first instant of a local date in tz: local midnight,
  // or the end of the gap when the zone skips midnight.
  function startOfDay(date, tz) {
    const guess = Date.UTC(date.y, date.m - 1, date.d);
    const t1 = guess - offset(guess, tz);
    const t2 = guess - offset(t1, tz);
    const onDay = [t1, t2].filter((t) => ymd(wall(t, tz)) === ymd(date));
    return onDay.length ? Math.min(...onDay) : Math.max(t1, t2);
  }

  function zones(extra) {
    let list = [];
    try {
      list = Intl.supportedValuesOf('timeZone');
    } catch (e) {
      list = [];
    }
    const set = new Set(list);
    for (const z of extra) {
      if (z) {
        set.add(z);
      }
    }
    set.add('UTC');
    return [...set].sort();
  }

  function validZone(tz) {
    try {
      new Intl.DateTimeFormat('en-US', { timeZone: tz });
      return true;
    } catch (e) {
      return false;
    }
  }

  // ---- iCalendar (RFC 5545): UTC times, CRLF lines folded at 75 octets.

  const icsTime = (iso) => new Date(iso).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
  const icsText = (s) => s.replace(/\\/g, '\\\\').replace(/;/g, '\\;').replace(/,/g, '\\,').replace(/\r?\n/g, '\\n');

  function fold(line) {
    const enc = new TextEncoder();
    const parts = [];
    let cur = '';
    let len = 0;
    let limit = 75;
    for (const ch of line) {
      const n = enc.encode(ch).length;
      if (len + n > limit) {
        parts.push(cur);
        cur = '';
        len = 0;
        limit = 74; // continuation lines start with a space
      }
      cur += ch;
      len += n;
    }
    parts.push(cur);
    return parts.join('\r\n ');
  }

  function ics(booking, summary, note) {
    const lines = [
      'BEGIN:VCALENDAR', 'VERSION:2.0', 'PRODID:-//bookline//booking page//EN', 'CALSCALE:GREGORIAN', 'METHOD:PUBLISH',
      'BEGIN:VEVENT',
      'UID:' + booking.id,
      'DTSTAMP:' + icsTime(new Date().toISOString()),
      'DTSTART:' + icsTime(booking.start),
      'DTEND:' + icsTime(booking.end),
      'SUMMARY:' + icsText(summary),
    ];
    if (note) {
      lines.push('DESCRIPTION:' + icsText(note));
    }
    lines.push('STATUS:CONFIRMED', 'END:VEVENT', 'END:VCALENDAR');
    return lines.map(fold).join('\r\n') + '\r\n';
  }

  function newKey() {
    if (window.crypto && crypto.randomUUID) {
      return 'page-' + crypto.randomUUID();
    }
    const b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return 'page-' + Array.from(b, (x) => pad(x.toString(16))).join('');
  }

  // The secret bookline gave with the hold: with a publishable key only the
  // page that made a hold may confirm or release it.
  function holdAuth(hold) {
    return hold.hold_secret ? { 'Hold-Secret': hold.hold_secret } : {};
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  // Codes that mean "this start is no longer free".
  const TAKEN = new Set(['slot_taken', 'external_busy', 'buffer_conflict', 'too_soon', 'too_far', 'outside_hours', 'misaligned']);

  // The cost budget (docs/api.md, "Cost budgets"): an availability query
  // costs a token per 100 candidate starts, a publishable key's client
  // address holds 40 tokens and earns 2 a second, and one query may span 62
  // days and 6,000 starts. The month view asks for a month at a time, in
  // pieces of at most CHUNK_STARTS starts, so no piece needs a full bucket:
  // a month on the default 15-minute grid is one query of 30 tokens, on a
  // 30-minute grid one of 15. A pool's month costs that for each of its
  // calendars, so its pieces are as many times shorter, and so does the
  // common availability of several calendars, each on its own grid. Days
  // are never asked for one by one.
  const CHUNK_STARTS = 3000;
  const MAX_RANGE_DAYS = 62;
  const DEFAULT_STEP_MINUTES = 15;
  const DAY_MS = 86400000;
  // Without a horizon the search for the first free day stops after this
  // many days: a closed calendar must not spend a visitor's budget for ever.
  const SEARCH_DAYS = 366;
  // A month's marks are asked for again when older than this.
  const MARKS_FRESH_MS = 5 * 60000;

  let instances = 0;

  const TEMPLATE = (id) => `
<div class="bl">
  <h2 class="bl-title" id="${id}-title" tabindex="-1">Book a time</h2>
  <p class="bl-sub"></p>
  <div class="bl-live bl-sr" role="status" aria-live="polite" aria-atomic="true"></div>
  <div class="bl-alert" role="alert" hidden><p class="bl-alert-text"></p><button type="button" class="bl-retry" hidden>Try again</button></div>
  <section class="bl-step bl-pick" aria-labelledby="${id}-slots-title" hidden>
    <div class="bl-row">
      <div class="bl-field"><label for="${id}-tz">Show times in</label><select id="${id}-tz" class="bl-tz"></select></div>
      <div class="bl-field bl-dur-field" hidden><label for="${id}-dur">Duration</label><select id="${id}-dur" class="bl-dur"></select></div>
    </div>
    <div class="bl-month">
      <div class="bl-month-nav">
        <button type="button" class="bl-nav bl-prev" aria-label="Previous month">&#8249;</button>
        <h3 class="bl-month-title" id="${id}-month-title" aria-live="polite"></h3>
        <button type="button" class="bl-nav bl-next" aria-label="Next month">&#8250;</button>
      </div>
      <table class="bl-cal" role="grid" aria-labelledby="${id}-month-title" aria-describedby="${id}-month-help">
        <thead><tr class="bl-weekdays"></tr></thead>
        <tbody class="bl-weeks"></tbody>
      </table>
      <p id="${id}-month-help" class="bl-muted bl-sr">Days with free times can be chosen. Arrow keys move between days, Page Up and Page Down between months.</p>
    </div>
    <p class="bl-none" hidden></p>
    <div class="bl-times">
      <h3 id="${id}-slots-title" class="bl-slots-title" tabindex="-1">Available times</h3>
      <ul class="bl-slots" aria-labelledby="${id}-slots-title"></ul>
      <p class="bl-empty" hidden>No free times on this day. Choose a day marked in the month above.</p>
    </div>
  </section>
  <section class="bl-step bl-details" aria-labelledby="${id}-details-title" hidden>
    <h3 id="${id}-details-title" tabindex="-1">Your details</h3>
    <p class="bl-summary bl-chosen"></p>
    <form class="bl-form" novalidate>
      <div class="bl-field"><label for="${id}-name">Your name</label><input id="${id}-name" class="bl-name" name="name" autocomplete="name" maxlength="200" required aria-describedby="${id}-name-err"></div>
      <p id="${id}-name-err" class="bl-muted bl-name-err" hidden>Please enter your name.</p>
      <div class="bl-field"><label for="${id}-note">Note (optional)</label><textarea id="${id}-note" class="bl-note" name="note" maxlength="1000"></textarea></div>
      <div class="bl-actions"><button type="submit" class="bl-primary bl-hold">Hold this time</button><button type="button" class="bl-back">Back</button></div>
    </form>
  </section>
  <section class="bl-step bl-held" aria-labelledby="${id}-held-title" hidden>
    <h3 id="${id}-held-title" tabindex="-1">Confirm your booking</h3>
    <p class="bl-summary bl-held-summary"></p>
    <p class="bl-with bl-held-with" hidden></p>
    <p class="bl-muted bl-countdown"></p>
    <div class="bl-actions"><button type="button" class="bl-primary bl-confirm">Confirm booking</button><button type="button" class="bl-release">Cancel</button></div>
  </section>
  <section class="bl-step bl-done" aria-labelledby="${id}-done-title" hidden>
    <h3 id="${id}-done-title" tabindex="-1">You're booked</h3>
    <p class="bl-summary bl-done-summary"></p>
    <p class="bl-with bl-done-with" hidden></p>
    <p class="bl-muted bl-done-id"></p>
    <div class="bl-actions"><a class="bl-ics" download="booking.ics">Add to calendar (.ics)</a><button type="button" class="bl-again">Book another time</button></div>
  </section>
</div>`;

  class BooklineBooking extends HTMLElement {
    connectedCallback() {
      if (this._started) {
        return;
      }
      this._started = true;
      injectStyle();
      this._id = 'bl' + ++instances;
      this.innerHTML = TEMPLATE(this._id);
      this._q = (sel) => this.querySelector(sel);
      this._seq = 0;
      this._wire();
      this._init();
    }

    disconnectedCallback() {
      clearInterval(this._timer);
    }

    get _base() {
      return (this.getAttribute('api') || scriptOrigin).replace(/\/+$/, '');
    }

    get _pool() {
      return this.getAttribute('pool') || '';
    }

    // _team is the calendars booked together, [] unless the page has
    // calendars="a,b,...".
    get _team() {
      return (this.getAttribute('calendars') || '').split(',').map((s) => s.trim()).filter(Boolean);
    }

    // _root is the API path of what the page books: the pool, when it has
    // one; the routes of several calendars (/v1/page, /v1/availability,
    // /v1/holds, which name them in calendar_ids); else the calendar. A
    // hold is confirmed or released on its own calendar either way
    // (_holdPath): a collective hold's is the first in id order.
    get _root() {
      if (this._pool) {
        return '/v1/pools/' + encodeURIComponent(this._pool);
      }
      return this._team.length ? '/v1' : '/v1/calendars/' + encodeURIComponent(this.getAttribute('calendar') || '');
    }

    // _path is the API path of a read (page, availability) of what the page
    // books, with the query params, and calendar_ids for several calendars.
    _path(what, params) {
      const qs = new URLSearchParams(params || {});
      if (this._team.length) {
        qs.set('calendar_ids', this._team.join(','));
      }
      const s = qs.toString();
      return this._root + '/' + what + (s ? '?' + s : '');
    }

    // _teamNames names the calendars booked together ("Dr Ada and Room
    // 3"), each by its name from the page profile, else its id.
    _teamNames() {
      const names = this._team.map((id) => this._calendarName(id));
      try {
        return new Intl.ListFormat(undefined, { style: 'long', type: 'conjunction' }).format(names);
      } catch (e) {
        return names.join(' and ');
      }
    }

    _holdPath(hold) {
      return '/v1/calendars/' + encodeURIComponent(hold.calendar_id) + '/holds/' + encodeURIComponent(hold.id);
    }

    // _calendarName is how the page names a calendar of a pool or of
    // calendars: its name from the page profile, else its id.
    _calendarName(id) {
      const cals = (this._info && this._info.calendars) || [];
      const c = cals.find((x) => x.calendar_id === id);
      return c && c.name ? c.name : id;
    }

    // _api calls bookline at path (from /v1 on).
    async _api(method, path, body, idemKey, extra) {
      const headers = Object.assign({ Accept: 'application/json' }, extra || {});
      const key = this.getAttribute('key');
      if (key) {
        headers.Authorization = 'Bearer ' + key;
      }
      if (body !== undefined) {
        headers['Content-Type'] = 'application/json';
      }
      if (idemKey) {
        headers['Idempotency-Key'] = idemKey;
      }
      const url = this._base + path;
      for (let attempt = 0; ; attempt++) {
        let res;
        try {
          res = await fetch(url, {
            method, headers, body: body === undefined ? undefined : JSON.stringify(body),
            mode: 'cors', credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer',
          });
        } catch (e) {
          throw new APIError(0, 'network', 'The booking service cannot be reached right now. Please try again.');
        }
        // 202: the decision is late. Asking again with the same
        // Idempotency-Key returns the one recorded answer once it is there.
        if (res.status === 202 && idemKey && attempt < 30) {
          await sleep(500);
          continue;
        }
        // A month of availability may need more tokens than a few seconds
        // earn; the server says how long (a full bucket refills in 20 s).
        if (res.status === 429 && attempt < 3) {
          await sleep(1000 * Math.min(30, +res.headers.get('Retry-After') || 1));
          continue;
        }
        let data = {};
        try {
          data = await res.json();
        } catch (e) {
          data = {};
        }
        if (!res.ok || res.status === 202) {
          const err = data.error || {};
          throw new APIError(res.status, err.code || 'http_' + res.status, err.message || 'The request failed (' + res.status + ').');
        }
        return data;
      }
    }

    _wire() {
      const q = this._q;
      q('.bl-prev').addEventListener('click', () => this._shiftMonth(-1));
      q('.bl-next').addEventListener('click', () => this._shiftMonth(1));
      q('.bl-weeks').addEventListener('click', (ev) => {
        const b = ev.target.closest('.bl-cal-day');
        if (b && b.getAttribute('aria-disabled') !== 'true') {
          this._selectDay(parseDate(b.dataset.date));
        }
      });
      q('.bl-weeks').addEventListener('keydown', (ev) => this._gridKey(ev));
      q('.bl-tz').addEventListener('change', () => {
        this._tz = q('.bl-tz').value;
        // Days are the visitor's: the month's marks change with the zone.
        if (this._searching || this._nothing) {
          this._findFirstFree();
        } else {
          this._renderMonth();
          this._loadMarks();
          this._renderSlots();
        }
        this._announce('Times are now shown in ' + this._tz + '.');
      });
      q('.bl-dur').addEventListener('change', () => {
        this._duration = +q('.bl-dur').value;
        if (this._searching || this._nothing) {
          this._findFirstFree();
        } else {
          this._loadMarks();
          this._loadDay();
        }
      });
      q('.bl-slots').addEventListener('click', (ev) => {
        const b = ev.target.closest('.bl-slot');
        if (b) {
          this._choose(b.dataset.start);
        }
      });
      q('.bl-form').addEventListener('submit', (ev) => {
        ev.preventDefault();
        this._hold();
      });
      q('.bl-back').addEventListener('click', () => this._show('pick'));
      q('.bl-confirm').addEventListener('click', () => this._confirm());
      q('.bl-release').addEventListener('click', () => this._release());
      q('.bl-again').addEventListener('click', () => {
        this._clearAlert();
        this._show('pick');
        this._loadDay();
      });
      q('.bl-retry').addEventListener('click', () => {
        this._clearAlert();
        this._hold();
      });
    }

    async _init() {
      const q = this._q;
      this._announce('Loading…');
      try {
        this._info = await this._api('GET', this._path('page'));
      } catch (e) {
        this._fail(e.status === 401 || e.status === 403 || e.status === 404
          ? (this._pool || this._team.length ? 'These calendars cannot be booked here.' : 'This calendar cannot be booked here.') : e.message);
        return;
      }
      const info = this._info;
      const name = this._team.length ? this._teamNames() : info.name;
      q('.bl-title').textContent = name ? 'Book a time with ' + name : 'Book a time';
      if (this._team.length && !(info.durations_minutes && info.durations_minutes.length)) {
        this._fail('These calendars have no booking length in common, so they cannot be booked together.');
        return;
      }
      const durs = info.durations_minutes && info.durations_minutes.length ? info.durations_minutes : [30];
      const want = +this.getAttribute('duration');
      this._duration = want > 0 ? want : durs[0];
      if (durs.length > 1) {
        const sel = q('.bl-dur');
        for (const d of durs) {
          sel.add(new Option(d + ' min', String(d), false, d === this._duration));
        }
        q('.bl-dur-field').hidden = false;
      }
      const own = Intl.DateTimeFormat().resolvedOptions().timeZone;
      const attrTZ = this.getAttribute('timezone');
      this._tz = attrTZ && validZone(attrTZ) ? attrTZ : (own || info.timezone || 'UTC');
      const tzSel = q('.bl-tz');
      for (const z of zones([this._tz, info.timezone])) {
        tzSel.add(new Option(z.replace(/_/g, ' '), z, false, z === this._tz));
      }
      tzSel.value = this._tz;
      this._step = info.step_minutes > 0 ? info.step_minutes : DEFAULT_STEP_MINUTES;
      this._months = new Map();
      this._mseq = 0;
      this._firstDay = firstWeekday();
      this._renderWeekdays();
      this._show('pick', false);
      const asked = parseDate(this.getAttribute('date'));
      if (asked) {
        this._date = asked;
        this._month = monthOf(asked);
        this._renderMonth();
        this._loadMarks();
        this._loadDay();
      } else {
        this._findFirstFree();
      }
    }

    _dayLabel(t) {
      return new Intl.DateTimeFormat(undefined, { timeZone: this._tz, weekday: 'long', day: 'numeric', month: 'long', year: 'numeric' }).format(new Date(t));
    }

    _timeLabel(t, withZone) {
      const o = { timeZone: this._tz, hour: 'numeric', minute: '2-digit' };
      if (withZone) {
        o.timeZoneName = 'short';
      }
      return new Intl.DateTimeFormat(undefined, o).format(new Date(t));
    }

    _describe(start, end) {
      const s = Date.parse(start);
      return this._dayLabel(s) + ', ' + this._timeLabel(s) + '–' + this._timeLabel(Date.parse(end), true);
    }

    // The grid's column heads: short names shown, full names read out.
    _renderWeekdays() {
      const head = this._q('.bl-weekdays');
      for (let i = 0; i < 7; i++) {
        const day = { y: 2023, m: 1, d: 1 + (this._firstDay + i) % 7 }; // 2023-01-01 was a Sunday
        const th = document.createElement('th');
        th.scope = 'col';
        const short = document.createElement('span');
        short.setAttribute('aria-hidden', 'true');
        short.textContent = dateLabel(day, { weekday: 'short' });
        const long = document.createElement('span');
        long.className = 'bl-sr';
        long.textContent = dateLabel(day, { weekday: 'long' });
        th.append(short, long);
        head.appendChild(th);
      }
    }

    _today() {
      const w = wall(Date.now(), this._tz);
      return { y: w.y, m: w.m, d: w.d };
    }

    // _lastDay is the last day on which a booking may start (the horizon
    // counts from now), or null when the calendar has no horizon.
    _lastDay() {
      const days = this._info && this._info.horizon_days;
      if (!days) {
        return null;
      }
      const w = wall(Date.now() + days * DAY_MS, this._tz);
      return { y: w.y, m: w.m, d: w.d };
    }

    _monthKey(mon, tz, duration) {
      return tz + ' ' + duration + ' ' + ym(mon);
    }

    // _monthFree is the set of the days ("YYYY-MM-DD", in the shown zone)
    // of month mon with a free start for the selected duration, from now to
    // the horizon: from one query a month, cut into pieces within the
    // budget (CHUNK_STARTS), on the grid the day's list uses.
    async _monthFree(mon) {
      const tz = this._tz;
      const key = this._monthKey(mon, tz, this._duration);
      const known = this._months.get(key);
      if (known && Date.now() - known.at < MARKS_FRESH_MS) {
        return known.days;
      }
      const from = Math.max(startOfDay({ y: mon.y, m: mon.m, d: 1 }, tz), nextMinute());
      const next = addMonths(mon, 1);
      let to = startOfDay({ y: next.y, m: next.m, d: 1 }, tz);
      const last = this._lastDay();
      if (last) {
        to = Math.min(to, startOfDay(addDays(last, 1), tz));
      }
      // A pool's availability, and the common availability of several
      // calendars, count the starts of each calendar, on its own grid when
      // the profile gives it (else on the finest, step_minutes).
      const cals = this._info.calendars && this._info.calendars.length ? this._info.calendars : [{}];
      const perMinute = cals.reduce((n, c) => n + 1 / (c.step_minutes > 0 ? c.step_minutes : this._step), 0);
      const piece = Math.min(Math.floor(CHUNK_STARTS / perMinute + 1e-9) * 60000, MAX_RANGE_DAYS * DAY_MS);
      const days = new Set();
      for (let a = from; a < to; a += piece) {
        const res = await this._api('GET', this._path('availability', {
          from: new Date(a).toISOString(), to: new Date(Math.min(to, a + piece)).toISOString(), duration: this._duration + 'm',
        }));
        for (const slot of res.slots || []) {
          days.add(ymd(wall(Date.parse(slot.start), tz)));
        }
      }
      this._months.set(key, { at: Date.now(), days });
      return days;
    }

    // _findFirstFree opens the page on the first day, from today to the
    // horizon, with a free start for the selected duration. It asks a
    // month at a time, and each month's answer is also that month's marks,
    // so the search costs what showing those months costs.
    async _findFirstFree() {
      const q = this._q;
      const seq = ++this._mseq;
      ++this._seq; // a day asked for before is not shown any more
      const today = this._today();
      const last = this._lastDay() || addDays(today, SEARCH_DAYS);
      this._searching = true;
      this._nothing = false;
      this._date = null;
      this._slots = null;
      this._marks = null;
      this._month = monthOf(today);
      this._renderMonth();
      q('.bl-none').hidden = true;
      q('.bl-times').hidden = false;
      q('.bl-slots').replaceChildren();
      q('.bl-slots').setAttribute('aria-busy', 'true');
      q('.bl-empty').hidden = true;
      q('.bl-slots-title').textContent = 'Looking for the first day with free times…';
      this._announce('Looking for the first day with free times…');
      for (let mon = monthOf(today); ym(mon) <= ym(last); mon = addMonths(mon, 1)) {
        let days;
        try {
          days = await this._monthFree(mon);
        } catch (e) {
          if (seq === this._mseq) {
            this._searching = false;
            q('.bl-slots').removeAttribute('aria-busy');
            this._applyMarks();
            this._alert(e.message, true);
          }
          return;
        }
        if (seq !== this._mseq) {
          return; // another zone or duration was asked for meanwhile
        }
        if (days.size > 0) {
          this._searching = false;
          this._month = mon;
          this._marks = days;
          this._date = parseDate([...days].sort()[0]);
          this._renderMonth();
          this._loadDay();
          return;
        }
      }
      this._searching = false;
      this._nothing = true;
      this._marks = new Set(); // today's month was searched: nothing in it
      this._applyMarks();
      q('.bl-slots').removeAttribute('aria-busy');
      q('.bl-times').hidden = true;
      const text = 'No free times from today to ' + dateLabel(last, LONG_DATE) + '. Please check again later.';
      q('.bl-none').textContent = text;
      q('.bl-none').hidden = false;
      this._announce(text);
    }

    // _loadMarks marks the shown month's days from its availability.
    async _loadMarks() {
      const seq = ++this._mseq;
      const weeks = this._q('.bl-weeks');
      this._marks = null;
      this._applyMarks();
      weeks.setAttribute('aria-busy', 'true');
      let days;
      try {
        days = await this._monthFree(this._month);
      } catch (e) {
        if (seq === this._mseq) {
          weeks.removeAttribute('aria-busy');
          this._alert(e.message, true);
        }
        return;
      }
      if (seq !== this._mseq) {
        return; // another month, zone or duration was asked for meanwhile
      }
      weeks.removeAttribute('aria-busy');
      this._marks = days;
      this._applyMarks();
    }

    // _markDay keeps a month's marks true to a fresher answer for one day.
    _markDay(date, tz, duration, free) {
      const known = this._months.get(this._monthKey(monthOf(date), tz, duration));
      const k = ymd(date);
      if (known && known.days.has(k) !== free) {
        if (free) {
          known.days.add(k);
        } else {
          known.days.delete(k);
        }
        this._applyMarks();
      }
    }

    _shiftMonth(n) {
      this._month = addMonths(this._month, n);
      this._renderMonth();
      this._loadMarks();
      const button = this._q(n < 0 ? '.bl-prev' : '.bl-next');
      if (button.disabled) {
        const day = this.querySelector('.bl-cal-day[tabindex="0"]');
        if (day) {
          day.focus();
        }
      }
    }

    // _renderMonth draws the shown month as a grid of weeks.
    _renderMonth() {
      const q = this._q;
      const mon = this._month;
      const active = document.activeElement;
      if (!this._focusDate && active && active.classList.contains('bl-cal-day') && this.contains(active)) {
        this._focusDate = active.dataset.date; // kept when it is in the new month
      }
      q('.bl-month-title').textContent = dateLabel({ y: mon.y, m: mon.m, d: 1 }, { month: 'long', year: 'numeric' });
      const rows = [];
      let row = null;
      const lead = (weekday({ y: mon.y, m: mon.m, d: 1 }) - this._firstDay + 7) % 7;
      for (let i = -lead; i < daysIn(mon); i++) {
        if (!row || row.children.length === 7) {
          row = document.createElement('tr');
          rows.push(row);
        }
        const td = document.createElement('td');
        if (i >= 0) {
          const b = document.createElement('button');
          b.type = 'button';
          b.className = 'bl-cal-day';
          b.dataset.date = ymd({ y: mon.y, m: mon.m, d: i + 1 });
          b.textContent = String(i + 1);
          td.appendChild(b);
        }
        row.appendChild(td);
      }
      while (row.children.length < 7) {
        row.appendChild(document.createElement('td'));
      }
      q('.bl-weeks').replaceChildren(...rows);
      this._applyMarks();
    }

    // _applyMarks shows each day of the grid as free (selectable) or not,
    // the chosen day, today, and which day the Tab key reaches (one day:
    // the arrow keys move between days, as in a grid).
    _applyMarks() {
      const q = this._q;
      const today = ymd(this._today());
      const last = this._lastDay();
      const end = last ? ymd(last) : '9999-12-31';
      const mon = ym(this._month);
      q('.bl-prev').disabled = !!this._searching || mon <= today.slice(0, 7);
      q('.bl-next').disabled = !!this._searching || mon >= end.slice(0, 7);
      const chosen = this._date ? ymd(this._date) : '';
      const active = document.activeElement && this.contains(document.activeElement) ? document.activeElement.dataset.date : undefined;
      const want = this._focusDate || active;
      this._focusDate = null;
      let tab = null;
      let tabRank = 5;
      for (const b of this.querySelectorAll('.bl-cal-day')) {
        const k = b.dataset.date;
        const open = k >= today && k <= end;
        const free = open && !!this._marks && this._marks.has(k);
        b.classList.toggle('bl-free', free);
        b.classList.toggle('bl-off', !free);
        b.classList.toggle('bl-sel', k === chosen);
        b.parentElement.setAttribute('aria-selected', String(k === chosen));
        if (free) {
          b.removeAttribute('aria-disabled');
        } else {
          b.setAttribute('aria-disabled', 'true');
        }
        if (k === today) {
          b.setAttribute('aria-current', 'date');
        } else {
          b.removeAttribute('aria-current');
        }
        const state = free ? 'free times' : open && !this._marks ? 'loading' : 'no free times';
        b.setAttribute('aria-label', dateLabel(parseDate(k), LONG_DATE) + ', ' + state);
        b.tabIndex = -1;
        const rank = k === want ? 0 : k === chosen ? 1 : free ? 2 : open ? 3 : 4;
        if (rank < tabRank) {
          tab = b;
          tabRank = rank;
        }
      }
      if (tab) {
        tab.tabIndex = 0;
        if (tabRank === 0 && document.activeElement !== tab) {
          tab.focus();
        }
      }
    }

    _gridKey(ev) {
      const b = ev.target.closest('.bl-cal-day');
      if (!b || ev.altKey || ev.ctrlKey || ev.metaKey) {
        return;
      }
      const d = parseDate(b.dataset.date);
      const col = (weekday(d) - this._firstDay + 7) % 7;
      const moves = { ArrowLeft: -1, ArrowRight: 1, ArrowUp: -7, ArrowDown: 7, Home: -col, End: 6 - col };
      let to;
      if (ev.key in moves) {
        to = addDays(d, moves[ev.key]);
      } else if (ev.key === 'PageUp' || ev.key === 'PageDown') {
        const mon = addMonths(d, ev.key === 'PageUp' ? -1 : 1);
        to = { y: mon.y, m: mon.m, d: Math.min(d.d, daysIn(mon)) };
      } else {
        return;
      }
      ev.preventDefault();
      const here = this.querySelector('.bl-cal-day[data-date="' + ymd(to) + '"]');
      if (here) {
        b.tabIndex = -1;
        here.tabIndex = 0;
        here.focus();
        return;
      }
      const nav = this._q(ym(to) < ym(this._month) ? '.bl-prev' : '.bl-next');
      if (!nav.disabled) {
        this._focusDate = ymd(to);
        this._month = monthOf(to);
        this._renderMonth();
        this._loadMarks();
      }
    }

    _selectDay(date) {
      this._date = date;
      this._nothing = false;
      this._q('.bl-none').hidden = true;
      this._q('.bl-times').hidden = false;
      this._applyMarks();
      this._loadDay();
    }

    async _loadDay() {
      const q = this._q;
      const seq = ++this._seq;
      const date = this._date;
      if (!date) {
        return; // no day is chosen: nothing was found, or the search failed
      }
      const tz = this._tz;
      const duration = this._duration;
      const dayStart = startOfDay(date, tz);
      const to = startOfDay(addDays(date, 1), tz);
      // Calendars without a minimum notice accept starts in the past; a
      // page offers none. The next whole minute keeps the grid intact.
      const from = Math.max(dayStart, nextMinute());
      this._slots = null;
      q('.bl-slots').replaceChildren();
      q('.bl-slots').setAttribute('aria-busy', 'true');
      q('.bl-empty').hidden = true;
      this._announce('Loading times for ' + this._dayLabel(dayStart) + '…');
      const params = { from: new Date(from).toISOString(), to: new Date(to).toISOString(), duration: duration + 'm' };
      let res;
      try {
        res = from >= to ? { slots: [] } : await this._api('GET', this._path('availability', params));
      } catch (e) {
        if (seq === this._seq) {
          q('.bl-slots').removeAttribute('aria-busy');
          this._alert(e.message, true);
        }
        return;
      }
      if (seq !== this._seq) {
        return; // a later day was asked for meanwhile
      }
      this._slots = res.slots || [];
      this._dayFrom = dayStart;
      this._markDay(date, tz, duration, this._slots.length > 0);
      q('.bl-slots-title').textContent = 'Free times on ' + this._dayLabel(dayStart);
      this._renderSlots();
      const n = this._slots.length;
      this._announce(n === 0 ? 'No free times on ' + this._dayLabel(dayStart) + '.'
        : n + (n === 1 ? ' free time' : ' free times') + ' on ' + this._dayLabel(dayStart) + '.');
    }

    _renderSlots() {
      const q = this._q;
      const list = q('.bl-slots');
      list.removeAttribute('aria-busy');
      list.replaceChildren();
      if (!this._slots) {
        return;
      }
      // The day is the visitor's: after a zone change, reload it.
      if (this._dayFrom !== startOfDay(this._date, this._tz)) {
        this._loadDay();
        return;
      }
      const labels = this._slots.map((s) => this._timeLabel(Date.parse(s.start)));
      const dup = new Set(labels.filter((l, i) => labels.indexOf(l) !== i));
      this._slots.forEach((s, i) => {
        const t = Date.parse(s.start);
        const w = wall(t, this._tz);
        const b = document.createElement('button');
        b.type = 'button';
        b.className = 'bl-slot';
        b.dataset.start = s.start;
        b.dataset.local = ymd(w) + 'T' + pad(w.h) + ':' + pad(w.min);
        b.textContent = dup.has(labels[i]) ? this._timeLabel(t, true) : labels[i];
        b.setAttribute('aria-label', this._timeLabel(t, true) + ', ' + this._dayLabel(t));
        const li = document.createElement('li');
        li.appendChild(b);
        list.appendChild(li);
      });
      q('.bl-empty').hidden = this._slots.length > 0;
    }

    _choose(start) {
      this._clearAlert();
      this._start = start;
      this._end = new Date(Date.parse(start) + this._duration * 60000).toISOString();
      this._q('.bl-chosen').textContent = this._describe(this._start, this._end);
      this._show('details');
      this._q('.bl-name').focus();
    }

    async _hold() {
      const q = this._q;
      const name = q('.bl-name').value.trim();
      if (!name) {
        q('.bl-name-err').hidden = false;
        q('.bl-name').setAttribute('aria-invalid', 'true');
        q('.bl-name').focus();
        return;
      }
      q('.bl-name-err').hidden = true;
      q('.bl-name').removeAttribute('aria-invalid');
      const note = q('.bl-note').value.trim();
      const maxTTL = (this._info && this._info.max_hold_ttl_seconds) || 300;
      const ttl = +this.getAttribute('hold-ttl') > 0 ? +this.getAttribute('hold-ttl') : Math.min(300, maxTTL);
      const body = { start: this._start, end: this._end, customer: name, ttl: ttl, metadata: { source: 'booking-page' } };
      if (note) {
        body.metadata.note = note;
      }
      if (this._team.length) {
        body.calendar_ids = this._team; // POST /v1/holds: held on every one or none
      }
      this._busy(true);
      this._announce('Holding this time for you…');
      let hold;
      try {
        hold = await this._api('POST', this._root + '/holds', body, newKey());
      } catch (e) {
        this._busy(false);
        if (TAKEN.has(e.code) || e.status === 409) {
          this._taken();
        } else {
          this._show('details');
          this._alert(e.message, true);
        }
        return;
      }
      this._busy(false);
      this._hold_ = hold;
      this._note = note;
      // Count down on the server's own interval, not the client's clock.
      const lasts = Date.parse(hold.expires_at) - Date.parse(hold.created_at);
      this._expiresAt = Date.now() + (lasts > 0 ? lasts : ttl * 1000);
      q('.bl-held-summary').textContent = this._describe(hold.start, hold.end);
      this._showWith('.bl-held-with', hold);
      this._show('held');
      this._tick();
      clearInterval(this._timer);
      this._timer = setInterval(() => this._tick(), 1000);
      this._announce('This time is held for you. Confirm within ' + Math.round((this._expiresAt - Date.now()) / 60000) + ' minutes.');
    }

    _tick() {
      const left = Math.max(0, Math.round((this._expiresAt - Date.now()) / 1000));
      this._q('.bl-countdown').textContent = 'Held for you for ' + Math.floor(left / 60) + ':' + pad(left % 60) + '.';
      if (left <= 0) {
        this._expired();
      }
    }

    _expired() {
      clearInterval(this._timer);
      this._hold_ = null;
      this._show('details', false);
      this._alert('Your hold on this time expired before it was confirmed. Try again to hold it anew.', false, true);
      this._q('.bl-retry').focus();
    }

    _taken() {
      clearInterval(this._timer);
      this._hold_ = null;
      this._show('pick');
      this._alert('Sorry, that time was just taken by someone else. The free times below are up to date; please choose another.', true);
      this._loadDay();
    }

    async _confirm() {
      const hold = this._hold_;
      if (!hold) {
        return;
      }
      this._busy(true);
      this._announce('Confirming…');
      let booking;
      try {
        booking = await this._api('POST', this._holdPath(hold) + '/confirm', undefined, newKey(), holdAuth(hold));
      } catch (e) {
        this._busy(false);
        if (e.code === 'hold_expired' || e.code === 'hold_not_found') {
          this._expired();
        } else {
          this._alert(e.message, true);
        }
        return;
      }
      clearInterval(this._timer);
      this._busy(false);
      this._hold_ = null;
      const q = this._q;
      q('.bl-done-summary').textContent = this._describe(booking.start, booking.end);
      this._showWith('.bl-done-with', booking);
      q('.bl-done-id').textContent = 'Booking reference: ' + booking.id;
      const name = this._team.length ? this._teamNames()
        : this._pool ? this._calendarName(booking.calendar_id) : this._info && this._info.name;
      const summary = name ? 'Booking with ' + name : 'Booking';
      const a = q('.bl-ics');
      a.href = 'data:text/calendar;charset=utf-8,' + encodeURIComponent(ics(booking, summary, this._note));
      a.download = 'booking-' + booking.id + '.ics';
      this._show('done');
      this._announce('Your booking is confirmed: ' + this._describe(booking.start, booking.end) + '.');
    }

    async _release() {
      const hold = this._hold_;
      clearInterval(this._timer);
      this._hold_ = null;
      this._show('pick');
      if (hold) {
        try {
          await this._api('DELETE', this._holdPath(hold), undefined, newKey(), holdAuth(hold));
        } catch (e) {
          // It expires by itself anyway.
        }
      }
      this._announce('The hold was released.');
      this._loadDay();
    }

    // _showWith says, on a pool's page, which calendar the hold or booking
    // b went to (the pool chose it, so the visitor learns it here), and on
    // the page of several calendars, all of them (b names the first only).
    _showWith(sel, b) {
      const p = this._q(sel);
      const team = this._team.length > 0;
      p.hidden = !this._pool && !team;
      p.textContent = team ? 'With ' + this._teamNames() : this._pool ? 'With ' + this._calendarName(b.calendar_id) : '';
      p.dataset.calendar = team ? (b.calendar_ids || []).join(',') : this._pool ? b.calendar_id : '';
    }

    _busy(on) {
      for (const b of this.querySelectorAll('.bl-hold, .bl-confirm, .bl-release, .bl-retry')) {
        b.disabled = on;
      }
    }

    _show(step, focus = true) {
      for (const s of ['pick', 'details', 'held', 'done']) {
        this._q('.bl-' + s).hidden = s !== step;
      }
      const sub = this._q('.bl-sub');
      sub.textContent = this._duration ? this._duration + ' minutes' : '';
      if (focus) {
        const h = this._q('.bl-' + step + ' h3[tabindex]');
        if (h) {
          h.focus();
        }
      }
    }

    _announce(text) {
      const live = this._q('.bl-live');
      live.textContent = text;
    }

    _alert(text, bad, retry) {
      const box = this._q('.bl-alert');
      box.classList.toggle('bl-bad', !!bad);
      this._q('.bl-alert-text').textContent = text;
      this._q('.bl-retry').hidden = !retry;
      box.hidden = false;
    }

    _clearAlert() {
      this._q('.bl-alert').hidden = true;
    }

    _fail(text) {
      this._show('none', false);
      this._alert(text, true);
      this._announce(text);
    }
  }

  customElements.define('bookline-booking', BooklineBooking);
})();
