// Stages 5-6 of attestation/verify/policy.py (evaluate_policy) for an authentic report: the
// platform policy (class platform-policy) and the workload identity (class workload-identity).
// The defaults come from the server's verifier data (Policy() of the Python verifier); a
// tenant's expected-values file overrides them key by key, as `verify-attested-run` reads it.
import { hex } from "./der.js";
import { Failure } from "./failure.js";

function uint(data, spec) {
  let value = 0n;
  for (let i = spec.size - 1; i >= 0; i -= 1) value = (value << 8n) | BigInt(data[spec.offset + i]);
  return value;
}

/** The policy in force: the defaults, then every policy key the tenant's file sets. */
export function policyOf(data, expected) {
  const policy = { ...data.policy.defaults };
  if (expected) {
    for (const key of Object.keys(data.policy.defaults)) {
      if (Object.hasOwn(expected, key)) policy[key] = expected[key];
    }
  }
  return policy;
}

function tcb(raw, product, data) {
  const layout = data.tcbLayouts[product];
  return Object.fromEntries(Object.entries(layout).map(([name, index]) => [name, raw[index]]));
}

function security(components, data) {
  return Object.fromEntries(Object.entries(components).filter(([name]) => data.policy.securityComponents.includes(name)));
}

function compare(a, b) {
  for (let i = 0; i < a.length; i += 1) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

/**
 * The platform-policy failures, then the workload-identity failures, of an authentic report.
 * `hardware`: it chains to AMD's roots; `workloadClaim`: the verdict is about a workload (an
 * envelope checked against the tenant's expected values), so MEASUREMENT must be pinned.
 */
export function evaluatePolicy(reportBytes, report, policy, { product, signer, hardware, workloadClaim, data }) {
  const field = (name) => data.report.fields.find((f) => f.name === name);
  const platform = [];
  const guest = uint(reportBytes, field("policy"));
  if ((guest >> BigInt(data.policy.guestBits.debug)) & 1n && !policy.allowDebug) platform.push("POLICY.DEBUG is 1: the host can read guest memory");
  if ((guest >> BigInt(data.policy.guestBits.migrate_ma)) & 1n && !policy.allowMigrationAgent) platform.push("POLICY.MIGRATE_MA is 1: a migration agent is allowed");
  const vmpl = Number(uint(reportBytes, field("vmpl")));
  if (!policy.allowedVmpl.includes(vmpl)) platform.push(`VMPL ${vmpl} not in allowedVmpl [${policy.allowedVmpl.join(", ")}]`);
  const firmware = (which) => ["major", "minor", "build"].map((part) => Number(uint(reportBytes, field(`${which}_${part}`))));
  const currentFw = firmware("current");
  const committedFw = firmware("committed");
  const currentTcb = reportBytes.subarray(field("current_tcb").offset, field("current_tcb").offset + 8);
  const committedTcb = reportBytes.subarray(field("committed_tcb").offset, field("committed_tcb").offset + 8);
  if (hex(currentTcb) !== hex(committedTcb) || compare(currentFw, committedFw) !== 0) {
    if (!policy.allowProvisionalFirmware) platform.push("provisional firmware not allowed: COMMITTED_TCB or firmware differs from CURRENT");
    else {
      const current = security(tcb(currentTcb, product, data), data);
      const committed = security(tcb(committedTcb, product, data), data);
      const dominates = Object.entries(committed).every(([name, value]) => current[name] >= value);
      if (!dominates || compare(currentFw, committedFw) < 0) platform.push("committed is newer than current");
    }
  }
  if (policy.minimumTcb !== null && policy.minimumTcb !== undefined) {
    let minimum = policy.minimumTcb;
    const perProduct = data.policy.products.some((line) => Object.hasOwn(minimum, line));
    if (perProduct) minimum = Object.hasOwn(minimum, product) ? minimum[product] : null;
    if (minimum === null) platform.push(`minimumTcb lists no minimum for product line ${product}`);
    else {
      const reported = security(tcb(report.reportedTcb, product, data), data);
      const short = Object.entries(minimum).filter(([name, value]) => value !== null && name in reported && reported[name] < value);
      if (short.length) platform.push("REPORTED_TCB below minimum: " + short.map(([name, value]) => `${name} ${reported[name]} < ${value}`).join(", "));
    }
  }
  if (policy.minimumFirmware !== null && policy.minimumFirmware !== undefined) {
    const minimum = String(policy.minimumFirmware).split(".").map(Number);
    if (compare(currentFw, minimum) < 0 || compare(committedFw, minimum) < 0) platform.push(`firmware below ${policy.minimumFirmware}`);
  }
  if (policy.allowedProducts !== null && policy.allowedProducts !== undefined && !policy.allowedProducts.includes(product)) platform.push(`${product} not in allowedProducts`);
  if (!policy.allowedSigners.includes(signer)) platform.push(`${signer} not in allowedSigners`);
  const info = uint(reportBytes, field("platform_info"));
  if (policy.rejectUnknownPlatformInfo && info & ~BigInt(data.policy.platformInfoKnownMask) & ((1n << 64n) - 1n)) {
    platform.push("PLATFORM_INFO has unknown bits (rejectUnknownPlatformInfo)");
  }
  if (platform.length) throw new Failure("platform-policy", platform.join("; "));

  const workload = [];
  const checked = [];
  const notChecked = [];
  const pins = [
    ["measurements", "MEASUREMENT", report.measurement],
    ["hostData", "HOST_DATA", report.hostData],
    ["idKeyDigests", "ID_KEY_DIGEST", report.idKeyDigest],
    ["authorKeyDigests", "AUTHOR_KEY_DIGEST", report.authorKeyDigest],
  ];
  const pinned = (key) => policy[key] !== null && policy[key] !== undefined;
  const others = pins.slice(1).some(([key]) => pinned(key));
  if (hardware && !pinned("measurements") && !policy.acceptAnyMeasurement && (workloadClaim || others)) {
    workload.push(`MEASUREMENT ${hex(report.measurement)} is not pinned (measurements absent) on AMD hardware: pin it with attested-replay expected --measurement`);
  }
  for (const [key, name, value] of pins) {
    if (!pinned(key)) {
      if (key === "measurements" && policy.acceptAnyMeasurement) notChecked.push("MEASUREMENT (acceptAnyMeasurement)");
      else if (key === "measurements" || key === "hostData") notChecked.push(`${name} (${key} not pinned)`);
      continue;
    }
    checked.push(name);
    if (!policy[key].map((v) => String(v).toLowerCase()).includes(hex(value))) workload.push(`${name} ${hex(value)} not in ${key}`);
  }
  if (workload.length) throw new Failure("workload-identity", workload.join("; "));
  return { checked, notChecked };
}
