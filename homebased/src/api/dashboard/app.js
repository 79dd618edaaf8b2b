// The homebased dashboard: one ES module, no library, no build step. It reads the same /v1
// routes as the CLI, polls them once a second (a tick waits for the previous one, so a slow
// daemon is never asked twice at once), and re-renders a part only when its bytes changed.
// Every text from the daemon goes through textContent, never innerHTML.

const TICK_MS = 1000;
// Machine facts and the Fleet directory change rarely: every tenth tick.
const FACTS_EVERY = 10;
const LOG_TAIL = 400;
const TOKEN_KEY = "homebased.web.token";
const LEVELS = ["high", "medium", "low"];
// The GPU sampler takes a sample at most every 5 s (each query bounded to 5 s) while
// anyone reads the lanes, and idles a minute after the last read: a sample older than this
// is an old one, kept from before, and says nothing about what runs on the card now.
const SAMPLE_STALE_MS = 30000;

const state = {
  // The machine the page shows: null is this daemon's own.
  machine: null,
  self: null,
  machines: [],
  // Whether the Fleet directory was refused (it is behind the Fleet token, SPEC 13).
  directoryRefused: false,
  lanes: "", // the lanes' UUIDs and names the queue rows were last named with
  queue: null, // the last queue listing, for renaming its rows when the lanes arrive
  names: new Map(), // job UUID -> name, from the queue listing
  otherNames: new Map(), // job UUID -> name, for runs of jobs no longer listed
  resourceNames: new Map(), // resource UUID -> name
  jobs: [],
  detail: null, // job UUID shown in the detail panel
  logTask: null, // task UUID whose log is shown
  logFollow: true,
  seen: {}, // last raw bytes per part, to skip identical re-renders
  skew: 0, // daemon clock minus browser clock, from the Date header (ms)
  tick: 0,
};

const tokenMode = document.querySelector('meta[name="homebased-token"]').content;
// Which token guards the writes: the web token, or the Fleet token where no web token is set.
const tokenKey = document.querySelector('meta[name="homebased-token-key"]').content;
const fleetKey = tokenKey === "[fleet] token";
const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------------------------------
// Talking to the daemon
// ---------------------------------------------------------------------------------------

class Refusal extends Error {
  constructor(status, error) {
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || "unknown";
  }
}

function token() {
  try {
    return localStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

function withMachine(path) {
  if (!state.machine) return path;
  return path + (path.includes("?") ? "&" : "?") + "machine=" + encodeURIComponent(state.machine);
}

// One exchange; answers {text, data}, `data` parsed when first read (an unchanged listing of
// thousands of jobs is compared as text and never parsed again). Reads carry the ETag of the
// last answer, and a 304 gives that answer back. A refusal throws a Refusal with the daemon's
// message; a 401 asks for the token, unless `ask` is false (an optional read, such as the
// Fleet directory, which the page's token may not open).
async function call(path, { method = "GET", body, machine = true, ask = true } = {}) {
  const headers = {};
  const url = machine ? withMachine(path) : path;
  const known = method === "GET" ? validated.get(url) : undefined;
  if (known) headers["If-None-Match"] = known.tag;
  const t = token();
  if (t) headers.Authorization = "Bearer " + t;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  const date = Date.parse(res.headers.get("Date") || "");
  if (!Number.isNaN(date)) state.skew = date - Date.now();
  // Unchanged since the answer kept: the same object again, whose text compares at once.
  if (res.status === 304 && known) return known.answer;
  const text = await res.text();
  if (!res.ok) {
    let error = null;
    try {
      error = JSON.parse(text).error;
    } catch {
      error = null;
    }
    if (res.status === 401 && ask) askForToken();
    throw new Refusal(res.status, error || { message: text || res.statusText });
  }
  let parsed;
  const answer = {
    text,
    get data() {
      if (parsed === undefined) parsed = JSON.parse(text);
      return parsed;
    },
  };
  const tag = res.headers.get("ETag");
  if (method === "GET" && tag) {
    validated.set(url, { tag, answer });
    // Old URLs (other jobs' details, other machines) are not kept for ever.
    if (validated.size > 64) validated.delete(validated.keys().next().value);
  }
  return answer;
}

// The last answer and its ETag per read URL: the page sends If-None-Match itself (with
// `no-store`, so the browser keeps no second copy), and a 304 reaches the script as such.
const validated = new Map();

// A fresh operation id. crypto.randomUUID exists only in secure contexts (https, localhost);
// a page opened by a LAN name (trainer.local:7677) gets a v4 UUID from getRandomValues.
function operationId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// A write with one operation id for all its tries: a reply lost on the way (fetch rejects
// with a TypeError) is sent again with the same id, and the daemon answers the stored
// result instead of doing it twice. A refusal is shown in the daemon's words.
async function write(path, body, done) {
  const op = { operation_id: operationId(), ...body };
  for (let attempt = 0; ; attempt++) {
    try {
      const { data } = await call(path, { method: "POST", body: op });
      notice(done(data), "ok");
      refreshSoon();
      return data;
    } catch (e) {
      if (e instanceof Refusal) {
        notice(`Refused (${e.code}): ${e.message}`, "error");
        return null;
      }
      if (attempt >= 4) {
        notice(`No answer from the daemon after ${attempt + 1} tries: ${e.message}`, "error");
        return null;
      }
      await sleep(250 * 2 ** attempt);
    }
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------
// Small rendering helpers
// ---------------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// UUIDv7s made close together share their first 8 digits (the time): the last 4 tell them
// apart. The full UUID is each id's title.
const short = (uuid) => (uuid ? `${String(uuid).slice(0, 8)}…${String(uuid).slice(-4)}` : "-");
const idText = (uuid) => el("code", { title: uuid, class: "id" }, short(uuid));

function age(since) {
  const t = Date.parse(since);
  if (Number.isNaN(t)) return "-";
  return span(Math.max(0, Math.round((Date.now() + state.skew - t) / 1000)));
}

// Whole seconds in a few characters: "42s", "3m 5s", "2h 10m", "3d 4h".
function span(s) {
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 120) return `${m}m ${s % 60}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

const clip = (text, n) => (text.length > n ? text.slice(0, n - 1) + "…" : text);
const when = (t) => (t ? new Date(t).toLocaleString() : "-");

function notice(text, kind) {
  const n = $("notice");
  n.textContent = text;
  n.className = kind;
  n.hidden = false;
  clearTimeout(notice.timer);
  notice.timer = setTimeout(() => (n.hidden = true), kind === "error" ? 15000 : 4000);
}

function resourceName(id) {
  return state.resourceNames.get(id) || short(id);
}

function jobName(id) {
  return state.names.get(id) || state.otherNames.get(id) || short(id);
}

// ---------------------------------------------------------------------------------------
// The machine header and the Fleet switch
// ---------------------------------------------------------------------------------------

// The header is read from /v1/status, not /v1/fleet/identity: that one is a
// machine-to-machine route, behind the Fleet token where one is set (SPEC 13).
function renderMachine(status) {
  state.self = status.machine;
  const here = status.name || short(status.machine);
  const shown = state.machines.find((m) => m.machine === state.machine);
  $("machine-name").textContent = shown ? shown.name || shown.address : here;
  document.title = `${$("machine-name").textContent} · homebased`;
  const peers = state.machines.filter((m) => m.source !== "self");
  const up = peers.filter((m) => m.state === "up").length;
  const facts = shown
    ? [
        ["machine", idText(shown.machine)],
        ["state", shown.state],
        ["address", shown.address || "-"],
        ["last seen", shown.last_seen ? age(shown.last_seen) + " ago" : "never"],
        ["via", here],
      ]
    : [
        ["machine", idText(status.machine)],
        ["version", status.version],
        ["socket", status.socket],
        ["web", status.web || "-"],
        ["jobs in flight", String(status.in_flight)],
        [
          "fleet",
          state.directoryRefused
            ? "directory behind the [fleet] token"
            : peers.length
              ? `${up} of ${peers.length} peers up`
              : "no peers",
        ],
      ];
  $("machine-facts").replaceChildren(
    ...facts.map(([k, v]) => el("span", { class: "fact" }, el("span", { class: "muted", text: `${k} ` }), v)),
  );
  const select = $("machine-select");
  $("machine-switch").hidden = peers.length === 0;
  const options = state.machines.map((m) =>
    el(
      "option",
      {
        value: m.source === "self" ? "" : m.machine || "",
        disabled: m.source !== "self" && (!m.machine || m.state !== "up"),
        selected: (m.source === "self" ? null : m.machine) === state.machine,
      },
      `${m.name || m.address}${m.source === "self" ? " (this machine)" : ` (${m.state})`}`,
    ),
  );
  select.replaceChildren(...options);
}

$("machine-select").addEventListener("change", (e) => {
  state.machine = e.target.value || null;
  state.seen = {};
  state.otherNames = new Map();
  state.detail = null;
  $("detail").hidden = true;
  refreshSoon(true);
});

// ---------------------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------------------

function phaseLine(run) {
  const p = run.phase;
  switch (p.phase) {
    case "executing":
      return `executing for ${age(p.started_at)}`;
    case "launching":
      return `launching for ${age(p.reserved_at)}`;
    case "stopping":
      return `stopping (${p.cause}), requested ${age(p.requested_at)} ago; ran ${age(p.started_at)}`;
    case "cleaning":
      return `cleaning up (attempt ${p.attempt})`;
    case "attention":
      return "held in Attention";
    default:
      return p.phase;
  }
}

// What else runs on the card, with the age of the sample it is read from. Unknown is never
// shown as none: a failed sample, or one too old to speak for now, is `?`, as the CLI's
// FOREIGN column says for a card it could not sample.
function processes(gpu) {
  if (!gpu) return null;
  const taken = Date.parse(gpu.sampled_at || "");
  const sampled = Number.isNaN(taken) ? "never sampled" : `sampled ${age(gpu.sampled_at)} ago`;
  if (gpu.processes === null) {
    return el("p", { class: "warn sample" }, `processes outside the queue: ? (${gpu.sample_error || "not sampled yet"}; ${sampled})`);
  }
  if (Number.isNaN(taken) || Date.now() + state.skew - taken > SAMPLE_STALE_MS) {
    return el("p", { class: "warn sample" }, `processes outside the queue: ? (${sampled})`);
  }
  const foreign = gpu.processes.filter((p) => !p.queue);
  if (!foreign.length) return el("p", { class: "muted sample" }, `no processes outside the queue · ${sampled}`);
  const mib = foreign.reduce((s, p) => s + (p.used_memory_mib || 0), 0);
  return el(
    "div",
    { class: "foreign" },
    el("p", { class: "warn sample" }, `${foreign.length} outside the queue, ${(mib / 1024).toFixed(1)} GiB · ${sampled}`),
    el(
      "ul",
      {},
      foreign.map((p) =>
        el(
          "li",
          { "data-pid": p.pid, title: p.command || "" },
          `pid ${p.pid} ${p.user || "?"} ${clip(p.command || "?", 48)} · ${p.used_memory_mib ?? "?"} MiB`,
        ),
      ),
    ),
  );
}

// The card's state from the last sample: a memory bar (used of total) and utilization,
// temperature and power where known. A value the driver did not give is `?`, never 0.
function cardState(gpu) {
  if (!gpu) return null;
  const gib = (mib) => (mib === null || mib === undefined ? "?" : (mib / 1024).toFixed(1));
  const used = gpu.memory_used_mib;
  const total = gpu.memory_total_mib;
  const known = typeof used === "number" && typeof total === "number" && total > 0;
  const share = known ? Math.min(100, Math.max(0, (100 * used) / total)) : 0;
  const parts = [`${gib(used)} / ${gib(total)} GiB`];
  parts.push(typeof gpu.utilization_percent === "number" ? `${gpu.utilization_percent}% util` : "util ?");
  if (typeof gpu.temperature_c === "number") parts.push(`${gpu.temperature_c} °C`);
  if (typeof gpu.power_w === "number") parts.push(`${Math.round(gpu.power_w)} W`);
  // Set through the CSSOM: the page's policy (style-src 'self') refuses style attributes.
  const fill = el("div", { class: "fill" });
  fill.style.width = `${share.toFixed(1)}%`;
  return el(
    "div",
    { class: "card-state" },
    el(
      "div",
      {
        class: known ? "membar" : "membar unknown",
        role: "meter",
        "aria-label": "GPU memory used",
        "aria-valuemin": "0",
        "aria-valuemax": known ? String(total) : "0",
        "aria-valuenow": known ? String(used) : "0",
        title: known ? `${share.toFixed(0)}% of the card's memory in use` : "memory not known",
      },
      fill,
    ),
    el("p", { class: "muted card-line", text: parts.join(" · ") }),
  );
}

function attention(r) {
  const p = r.run.phase;
  const failure = p.failure || {};
  const remaining = Array.isArray(failure.remaining) ? failure.remaining : [];
  return el(
    "div",
    { class: "attention" },
    el("p", {}, el("strong", { text: "Attention " }), idText(p.id), ` · ${failure.result || "cleanup failed"}`),
    failure.message ? el("p", { text: failure.message }) : null,
    remaining.length
      ? el(
          "p",
          {},
          "remaining: ",
          remaining.map((x) => `pid ${x.pid}${x.reason ? ` (${x.reason})` : ""}`).join(", "),
        )
      : null,
    el(
      "button",
      {
        type: "button",
        class: "danger",
        "data-action": "release",
        "data-attention": p.id,
        title: "Only after you checked the machine: the lane serves again",
        onclick: () =>
          write("/v1/release", { attention: p.id }, (d) => `Released ${resourceName(d.resource)}`),
      },
      "Release",
    ),
  );
}

// Steps in the CLI's words (cli/render.rs): a run's step is its index from 0, as
// HOMEBASED_STEP_INDEX, `job show`'s STEP column, `job log`'s heads and `job history` say
// it; a job's place among its steps is `job show`'s "step N of M".
const runStep = (step) => `step ${step}`;
// As job show's header (render::job_progress): counted from 0, as the runs' STEP column.
const jobStep = (j) =>
  j.steps <= 1 ? `step ${j.step} (one step)` : `step ${j.step} (steps 0-${j.steps - 1})`;

function renderResources(list) {
  state.resourceNames = new Map(list.resources.map((r) => [r.id, r.name]));
  const cards = list.resources.map((r) => {
    const phase = r.run ? r.run.phase.phase : "idle";
    const gpu = r.gpu;
    return el(
      "article",
      { class: `resource ${phase}`, "data-resource": r.id, "data-name": r.name },
      el(
        "header",
        {},
        el("h3", { text: r.name }),
        el("span", { class: `phase ${phase}`, text: phase }),
      ),
      el(
        "p",
        { class: "muted" },
        r.device === null ? r.origin : `device ${r.device}`,
        gpu && gpu.model ? ` · ${gpu.model}` : "",
        gpu && gpu.changed ? " · card changed!" : "",
      ),
      r.run
        ? el(
            "p",
            {},
            el(
              "a",
              { href: "#", onclick: (e) => (e.preventDefault(), openDetail(r.run.job, r.run.task)) },
              jobName(r.run.job),
            ),
            " · task ",
            idText(r.run.task),
            ` · run ${r.run.run_number}, ${runStep(r.run.step)}`,
          )
        : null,
      r.run ? el("p", { class: "phase-line", text: phaseLine(r.run) }) : null,
      cardState(gpu),
      processes(gpu),
      r.run && r.run.phase.phase === "attention" ? attention(r) : null,
    );
  });
  $("resources").replaceChildren(
    ...(cards.length ? cards : [el("p", { class: "muted" }, "No resources on this machine.")]),
  );
}

// ---------------------------------------------------------------------------------------
// The queue
// ---------------------------------------------------------------------------------------

function waitingText(w) {
  if (!w) return "";
  switch (w.reason) {
    case "resources": {
      const on = w.blockers.map((b) => `${resourceName(b.resource)} (${jobName(b.job)}, ${b.priority})`);
      return `busy with work it may not stop: ${on.join(", ")}`;
    }
    case "stopping":
      return `a ${w.cause} stop on ${resourceName(w.resource)} was requested ${age(w.requested_at)} ago for it`;
    case "cleaning":
      return `${resourceName(w.resource)} is cleaning up after a run`;
    case "attention":
      return `${resourceName(w.resource)} is held in Attention until someone releases it`;
    case "ahead":
      return `${jobName(w.job)}, earlier in serving order, takes the free resource`;
    case "no_resources":
      return "this machine has no resource it may use";
    case "reserved":
      return `a free resource is reserved for ${jobName(w.job)}, starting ${estimateText(w.estimated_start)}`;
    case "gathering":
      return `gathering its resources: ${w.free.length} of ${w.resources.length} free, all ${estimateText(w.estimated_start)}`;
    case "storage_unavailable":
      return `storage unavailable for ${age(w.since)}: run directories cannot be made`;
    case "dependency":
      // The job it names is queued or active, so the queue listing knows its name.
      return `after ${jobName(w.job)} (${w.state})`;
    default:
      return w.reason;
  }
}

// When a reservation's resources are estimated free (null: a run without a time limit
// holds one).
function estimateText(at) {
  if (!at) return "at an unknown time";
  const t = Date.parse(at);
  if (Number.isNaN(t)) return "at an unknown time";
  const s = Math.round((t - (Date.now() + state.skew)) / 1000);
  return s <= 0 ? "about now" : `in about ${span(s)}`;
}

// The jobs a job names in `after`, or those naming it, as `job show` lists them.
function linksText(links) {
  if (!links || !links.length) return "-";
  return links.map((l) => (l.name ? `${l.name} (${l.state})` : `${short(l.job)} (removed)`)).join(", ");
}

// A job's target: `any`, or the lane(s) it is pinned to, by name (the UUID until the lanes
// are known). Several lanes are written as the CLI writes them (render::target_name,
// `gpu0,gpu1`), so that the page and `resource jobs` say the same words.
function targetText(target, gpus) {
  if (Array.isArray(target)) return target.map(resourceName).join(",");
  if (target === "any") return gpus > 1 ? `${gpus} x any` : "any";
  return resourceName(target);
}

function stateText(j) {
  if (j.state.state === "active") {
    const lanes = j.state.resources && j.state.resources.length ? j.state.resources : [j.state.resource];
    // As `job show` and `resource jobs` say it (render::state_on): `active on gpu1,gpu2`.
    return `active on ${lanes.map(resourceName).join(",")}`;
  }
  if (j.state.state === "queued") return j.state.resume ? "queued (resumes)" : "queued";
  return j.state.state;
}

function moveTo(job, placement, what) {
  return write(`/v1/jobs/${job.id}/move`, { placement }, (d) => `${job.name}: ${what}, now ${d.priority} #${d.position}`);
}

function cancelButton(job) {
  // Two clicks: the first arms the button for a few seconds (kept in `state`, so a
  // re-render in between does not disarm it), the second sends the cancel.
  const armed = () => state.armed && state.armed.job === job.id && Date.now() < state.armed.until;
  const b = el("button", { type: "button", class: "danger", "data-action": "cancel" }, armed() ? "Confirm cancel" : "Cancel");
  b.addEventListener("click", () => {
    if (!armed()) {
      state.armed = { job: job.id, until: Date.now() + 4000 };
      b.textContent = "Confirm cancel";
      setTimeout(() => {
        if (!armed()) b.textContent = "Cancel";
      }, 4100);
      return;
    }
    state.armed = null;
    write(`/v1/jobs/${job.id}/cancel`, {}, (d) =>
      d.result === "stopping" ? `${job.name}: stopping its run` : `${job.name}: ${d.result.replace("_", " ")}`,
    );
  });
  return b;
}

function jobRow(j) {
  const level = el(
    "select",
    {
      "aria-label": "level",
      "data-action": "level",
      onchange: (e) => moveTo(j, { priority: e.target.value }, `moved to ${e.target.value}`),
    },
    LEVELS.map((l) => el("option", { value: l, selected: l === j.priority }, l)),
  );
  return el(
    "tr",
    { "data-job": j.id, "data-state": j.state.state, class: state.detail === j.id ? "selected" : null },
    el("td", { class: "pos", text: j.position ?? "-" }),
    el(
      "td",
      { class: "name" },
      el("a", { href: "#", onclick: (e) => (e.preventDefault(), openDetail(j.id)) }, j.name),
      el("br"),
      idText(j.id),
    ),
    el("td", { "data-label": "state", class: "state", text: stateText(j) }),
    el("td", { "data-label": "target", text: targetText(j.target, j.gpus) }),
    el("td", { "data-label": "steps done", text: `${j.step}/${j.steps}` }),
    el("td", { class: "waiting", text: waitingText(j.waiting) }),
    el(
      "td",
      { class: "actions" },
      el("button", { type: "button", "data-action": "front", title: "front of its level", onclick: () => moveTo(j, { front: true }, "moved to the front") }, "Front"),
      el("button", { type: "button", "data-action": "back", title: "back of its level", onclick: () => moveTo(j, { back: true }, "moved to the back") }, "Back"),
      level,
      cancelButton(j),
    ),
  );
}

// Rows by job UUID with the text they were built from: a re-render rebuilds only the rows
// whose job changed, and moves the others (2,000 rows rebuilt cost a few hundred ms).
const rows = new Map();

function cachedRow(j) {
  // The row's words too, not only the job's bytes: a lane's name learnt later (the lanes read
  // after the queue, or renamed) must rename the rows that show its UUID.
  const words = [stateText(j), targetText(j.target, j.gpus), waitingText(j.waiting)].join("\u0000");
  const key = JSON.stringify(j) + words + (state.detail === j.id ? "*" : "");
  const had = rows.get(j.id);
  if (had && had.key === key && !(state.armed && state.armed.job === j.id)) return had.tr;
  const tr = jobRow(j);
  rows.set(j.id, { key, tr });
  return tr;
}

// One table per level, kept across renders: a render moves, inserts and removes rows in
// place, so that a change of one job leaves the other rows' layout alone.
const groups = new Map();
const emptyQueue = el("p", { class: "muted" }, "The queue is empty.");

function group(level) {
  if (!groups.has(level)) {
    const caption = el("caption");
    const tbody = el("tbody");
    const wrap = el(
      "div",
      { class: "scroll" },
      el(
        "table",
        { class: "jobs", "data-level": level },
        caption,
        el(
          "thead",
          {},
          el("tr", {}, ["#", "job", "state", "target", "steps done", "waiting because", ""].map((h) => el("th", { text: h }))),
        ),
        tbody,
      ),
    );
    groups.set(level, { wrap, caption, tbody });
  }
  return groups.get(level);
}

// Makes `parent`'s children exactly `wanted`, touching only what differs.
function reconcile(parent, wanted) {
  let cur = parent.firstChild;
  for (const node of wanted) {
    if (cur === node) {
      cur = cur.nextSibling;
    } else {
      parent.insertBefore(node, cur);
    }
  }
  while (cur) {
    const next = cur.nextSibling;
    cur.remove();
    cur = next;
  }
}

function renderQueue(list) {
  state.queue = list;
  state.jobs = list.jobs;
  const listed = new Set(list.jobs.map((j) => j.id));
  for (const id of rows.keys()) if (!listed.has(id)) rows.delete(id);
  state.names = new Map(list.jobs.map((j) => [j.id, j.name]));
  // Ages in a waiting reason ("requested 12s ago") move on without a change of bytes.
  state.queueAges = list.jobs.some((j) => j.waiting && j.waiting.reason === "stopping");
  $("queue-count").textContent = `(${list.jobs.length})`;
  const shown = [];
  for (const level of LEVELS) {
    const jobs = list.jobs.filter((j) => j.priority === level);
    if (!jobs.length) continue;
    const g = group(level);
    const caption = `${level} · ${jobs.length}`;
    if (g.caption.textContent !== caption) g.caption.textContent = caption;
    reconcile(g.tbody, jobs.map(cachedRow));
    shown.push(g.wrap);
  }
  reconcile($("queue"), shown.length ? shown : [emptyQueue]);
}

// ---------------------------------------------------------------------------------------
// A job's detail and a run's log
// ---------------------------------------------------------------------------------------

function openDetail(job, task) {
  state.detail = job;
  state.logTask = task || null;
  state.logFollow = true;
  delete state.seen.detail;
  delete state.seen.log;
  $("detail").hidden = false;
  $("detail-body").replaceChildren(el("p", { class: "muted" }, "loading…"));
  refreshSoon();
}

$("detail-close").addEventListener("click", () => {
  state.detail = null;
  state.logTask = null;
  $("detail").hidden = true;
});

const compact = (v) => (v === null || v === undefined ? "-" : typeof v === "object" ? JSON.stringify(v) : String(v));

function exitText(p) {
  if (!p) return "-";
  if (p.kind === "exit") return `exit ${p.code}`;
  if (p.kind === "signal") return `signal ${p.signal}`;
  // As the CLI's PROCESS column says it: the stop's cause is in its own column.
  if (p.kind === "cancelled") return "stopped";
  if (p.kind === "spawn_failed") return `spawn failed: ${p.message || "(no message)"}`;
  return compact(p);
}

function renderDetail(d) {
  $("detail-name").textContent = d.name;
  if (!state.logTask) state.logTask = d.active_run || (d.runs.length ? d.runs[d.runs.length - 1].task : null);
  const runs = el(
    "table",
    { class: "runs" },
    el(
      "thead",
      {},
      el("tr", {}, ["task", "run", "step", "resource", "status", "stop cause", "started", "ended", "exit", "cleanup", ""].map((h) => el("th", { text: h }))),
    ),
    el(
      "tbody",
      {},
      d.runs.map((r) =>
        el(
          "tr",
          { "data-task": r.task, class: r.task === state.logTask ? "selected" : null },
          el("td", {}, idText(r.task)),
          el("td", { text: r.run_number }),
          el("td", { text: r.step }),
          // Every lane the run held (job show's `resources`), as the state names them.
          el("td", { text: (r.resources && r.resources.length ? r.resources : [r.resource]).map(resourceName).join(",") }),
          el("td", { text: r.status }),
          el("td", { text: r.stop_cause || "-" }),
          el("td", { text: when(r.started_at) }),
          el("td", { text: when(r.ended_at) }),
          el("td", { text: exitText(r.process) }),
          el("td", { class: "cleanup", text: r.cleanup ? r.cleanup.result || compact(r.cleanup) : "-" }),
          el("td", {}, el("button", { type: "button", "data-action": "log", onclick: () => showLog(r.task) }, "Log")),
        ),
      ),
    ),
  );
  const facts = [
    ["job", idText(d.id)],
    ["state", stateText(d)],
    ["level", `${d.priority}${d.position ? ` #${d.position}` : ""}`],
    ["progress", jobStep(d)],
    ["target", targetText(d.target, d.gpus)],
    ["waiting because", waitingText(d.waiting) || "-"],
    ["after", linksText(d.dependencies)],
    ["waited on by", linksText(d.dependents)],
    ["last stop", d.last_stop_cause || "-"],
    ["created", when(d.created_at)],
  ];
  const events = el(
    "ol",
    { class: "events" },
    d.events.map((e) => el("li", {}, el("strong", { text: e.event || "event" }), " ", el("span", { class: "muted", text: compact(e) }))),
  );
  const log = el(
    "div",
    { class: "log" },
    el(
      "h3",
      {},
      "Output of task ",
      state.logTask ? idText(state.logTask) : "-",
      el("label", {}, el("input", { type: "checkbox", id: "log-follow", checked: state.logFollow, onchange: (e) => (state.logFollow = e.target.checked) }), " follow"),
    ),
    el("pre", { id: "log" }, $("log") ? $("log").textContent : ""),
  );
  $("detail-body").replaceChildren(
    el("dl", { class: "facts" }, facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v)])),
    el("h3", { text: `Runs (${d.runs.length})` }),
    el("div", { class: "scroll" }, runs),
    el("h3", { text: `Events (${d.events.length})` }),
    events,
    log,
  );
}

function showLog(task) {
  state.logTask = task;
  state.logFollow = true;
  delete state.seen.log;
  delete state.seen.detail;
  refreshSoon();
}

function renderLog(l) {
  const pre = $("log");
  if (!pre) return;
  const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
  pre.textContent = (l.truncated ? "… (earlier output not shown)\n" : "") + (l.log || "(no output yet)");
  if (atBottom || state.logFollow) pre.scrollTop = pre.scrollHeight;
}

// ---------------------------------------------------------------------------------------
// The token prompt
// ---------------------------------------------------------------------------------------

function askForToken() {
  $("token-form").hidden = false;
  $("token-input").focus();
}

$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  try {
    localStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
  } catch {
    notice("This browser keeps no local storage: the token lasts until the page closes", "error");
  }
  $("token-input").value = "";
  $("token-form").hidden = true;
  state.seen = {};
  refreshSoon(true);
});

// ---------------------------------------------------------------------------------------
// The loop
// ---------------------------------------------------------------------------------------

// Renders `part` only if its bytes changed (or ages must move on: every tick for resources).
function fresh(part, text) {
  if (state.seen[part] === text) return false;
  state.seen[part] = text;
  return true;
}

// Each read settles on its own: a failing one (the lanes slow to answer, the Fleet directory
// refused) leaves what the others show, and the first failure is reported after the rest
// was rendered.
const settled = (promise) => promise.then((answer) => ({ answer }), (error) => ({ error }));

// The Fleet directory, for the switch. It is a machine-to-machine route, behind the Fleet
// token where one is set (SPEC 13): the page reads it only with a token in hand there, never
// asks for a token for it, and shows no switch while it is refused.
function readDirectory() {
  if (fleetKey && !token()) return Promise.reject(new Refusal(401, { code: "permission" }));
  return call("/v1/fleet/machines", { machine: false, ask: false });
}

function applyDirectory(read) {
  if (read.answer) {
    state.machines = read.answer.data.machines;
    state.directoryRefused = false;
  } else if (read.error instanceof Refusal) {
    state.machines = [];
    state.directoryRefused = read.error.status === 401;
    // No switch to come back by: show this machine again.
    if (state.machine) {
      state.machine = null;
      state.seen = {};
      state.detail = null;
      $("detail").hidden = true;
    }
  }
  // A read that got no answer keeps the last directory.
}

async function refresh() {
  const facts = state.tick % FACTS_EVERY === 0;
  state.tick++;
  // The directory first: a refusal of it may bring the page back to this machine.
  const directory = facts ? await settled(readDirectory()) : null;
  if (directory) applyDirectory(directory);
  const [resources, jobs, status] = await Promise.all([
    settled(call("/v1/resources")),
    settled(call("/v1/jobs")),
    facts ? settled(call("/v1/status", { machine: false })) : null,
  ]);
  if (status && status.answer) renderMachine(status.answer.data);
  // Names first: the resource cards show the names of the jobs they run.
  const queueChanged = jobs.answer ? fresh("jobs", jobs.answer.text) : false;
  if (jobs.answer && (queueChanged || !state.names.size)) {
    state.names = new Map(jobs.answer.data.jobs.map((j) => [j.id, j.name]));
  }
  let lanesChanged = false;
  if (resources.answer) {
    const list = resources.answer.data;
    state.resourceNames = new Map(list.resources.map((r) => [r.id, r.name]));
    const lanes = JSON.stringify([...state.resourceNames]);
    lanesChanged = lanes !== state.lanes;
    state.lanes = lanes;
    // A lane may hold the run of a job that left the queue listing (it ended, and its run
    // is cleaning or in Attention): its name is asked for once.
    for (const r of list.resources) {
      const job = r.run && r.run.job;
      if (job && !state.names.has(job) && !state.otherNames.has(job)) {
        state.otherNames.set(job, short(job));
        call(`/v1/jobs/${job}`).then(
          (d) => state.otherNames.set(job, d.data.name),
          () => state.otherNames.delete(job),
        );
      }
    }
    renderResources(list); // every tick: the ages move on
  }
  const queue = jobs.answer ? jobs.answer.data : state.queue;
  if (queue && (queueChanged || lanesChanged || (state.queueAges && state.tick % 5 === 0))) renderQueue(queue);
  const failed = [resources, jobs, status].find((read) => read && read.error);
  if (failed) throw failed.error;
  if (state.detail) {
    const job = state.detail;
    const d = await call(`/v1/jobs/${job}`);
    if (state.detail !== job) return;
    if (fresh("detail", d.text) || lanesChanged) renderDetail(d.data);
    const task = state.logTask;
    const run = d.data.runs.find((r) => r.task === task);
    const live = run && !run.ended_at;
    if (task && (state.seen.log === undefined || (live && state.logFollow))) {
      const l = await call(`/v1/tasks/${task}/log?tail=${LOG_TAIL}`);
      if (fresh("log", l.text) || !$("log").textContent) renderLog(l.data);
    }
  }
}

let wake = null;
let forceFacts = false;
// Runs the next tick now rather than at the end of its wait.
function refreshSoon(facts = false) {
  if (facts) forceFacts = true;
  if (wake) wake();
}

async function loop() {
  for (;;) {
    if (forceFacts) {
      state.tick = 0;
      forceFacts = false;
    }
    try {
      const started = performance.now();
      await refresh();
      // The last tick's cost (reads, parsing, rendering) as a User Timing measure, which
      // scripts/bench reads; only the latest is kept, so the timeline never grows.
      performance.clearMeasures("homebased-refresh");
      performance.measure("homebased-refresh", { start: started });
      $("live").textContent = `updated ${new Date().toLocaleTimeString()}`;
      $("live").className = "ok";
    } catch (e) {
      $("live").textContent = e instanceof Refusal ? `refused: ${e.message}` : `daemon unreachable: ${e.message}`;
      $("live").className = "error";
      // Without the facts the header stays stale: fetch them again next time.
      state.tick = 0;
    }
    await new Promise((r) => {
      wake = r;
      setTimeout(r, TICK_MS);
    });
    wake = null;
  }
}

// The web token is the operator's own key to this page: asked for at once. The Fleet token
// guards only the writes here (reads stay open) and is a machine secret a viewer may not
// hold: asked for when a write needs it.
if ((tokenMode === "reads" || (tokenMode === "writes" && !fleetKey)) && !token()) askForToken();
loop();
