// The SEV-SNP report, read with the field table the server sends from attestation/abi/report.py
// (LAYOUT): every name and offset below comes from that table, never from this file.
import { Failure } from "./failure.js";
import { hex } from "./der.js";

function field(layout, name) {
  const spec = layout.fields.find((f) => f.name === name);
  if (!spec) throw new Error(`the report layout has no field ${name}`);
  return spec;
}

function bytesOf(data, spec) {
  return data.subarray(spec.offset, spec.offset + spec.size);
}

function uint(data, spec) {
  let value = 0n;
  for (let i = spec.size - 1; i >= 0; i -= 1) value = (value << 8n) | BigInt(data[spec.offset + i]);
  return value;
}

function describe(spec) {
  const end = spec.offset + spec.size;
  return `${spec.name} [0x${spec.offset.toString(16).padStart(3, "0")}:0x${end.toString(16).padStart(3, "0")}]`;
}

function zero(bytes) {
  return bytes.every((b) => b === 0);
}

/** The product line of a CPUID family/model pair, or null when no known product has it. */
export function productOfCpuid(layout, family, model) {
  for (const [fam, lo, hi, product] of layout.cpuidProducts) {
    if (fam === family && model >= lo && model <= hi) return product;
  }
  return null;
}

/** Parse a raw report: the malformed-input rules of attestation.abi.report.parse_report. */
export function parseReport(layout, data) {
  if (data.length !== layout.size) {
    throw new Failure("malformed", `report must be exactly ${layout.size} bytes, got ${data.length}`);
  }
  const get = (name) => field(layout, name);
  const version = Number(uint(data, get("version")));
  if (!layout.supportedVersions.includes(version)) {
    throw new Failure("malformed", `${describe(get("version"))} unsupported (${version})`);
  }
  if (Number(uint(data, get("signature_algo"))) !== layout.signatureAlgo) {
    throw new Failure("malformed", `${describe(get("signature_algo"))} not 1 (ECDSA P-384)`);
  }
  const flags = Number(uint(data, get("flags")));
  if (flags >>> 5) throw new Failure("malformed", `${describe(get("flags"))} bits 31:5 must be zero`);
  const signingKey = (flags >>> 2) & 0b111;
  if (!Object.values(layout.signingKeys).includes(signingKey)) {
    throw new Failure("malformed", `${describe(get("flags"))} SIGNING_KEY reserved value`);
  }
  for (const spec of layout.fields.filter((f) => f.reserved)) {
    if (!zero(bytesOf(data, spec))) throw new Failure("malformed", `${describe(spec)} not all zero`);
  }
  const cpuid = ["cpuid_fam_id", "cpuid_mod_id", "cpuid_step"].map((name) => Number(uint(data, get(name))));
  let product = null;
  if (version < 3) {
    if (cpuid.some((value) => value !== 0)) {
      throw new Failure("malformed", "CPUID bytes are reserved in version 2, not zero");
    }
  } else {
    product = productOfCpuid(layout, cpuid[0], cpuid[1]);
    if (product === null) {
      throw new Failure("malformed", `cpuid_fam_id/cpuid_mod_id name no known SEV-SNP product: ${cpuid[0]}/${cpuid[1]}`);
    }
  }
  if (version < 5) {
    for (const name of ["launch_mit_vector", "current_mit_vector"]) {
      if (!zero(bytesOf(data, get(name)))) {
        throw new Failure("malformed", `${describe(get(name))} reserved in version ${version}, not zero`);
      }
    }
  }
  const policy = uint(data, get("policy"));
  if (!((policy >> BigInt(layout.policyReservedOneBit)) & 1n)) {
    throw new Failure("malformed", `${describe(get("policy"))} reserved bit 17 must be 1`);
  }
  if (policy >> BigInt(layout.policyKnownBits)) {
    throw new Failure("malformed", `${describe(get("policy"))} reserved bits 63:26 set`);
  }
  const signatureR = bytesOf(data, get("signature_r"));
  const signatureS = bytesOf(data, get("signature_s"));
  return {
    version,
    product,
    signingKey,
    signed: data.subarray(0, layout.signedEnd),
    reportData: bytesOf(data, get("report_data")),
    measurement: bytesOf(data, get("measurement")),
    hostData: bytesOf(data, get("host_data")),
    idKeyDigest: bytesOf(data, get("id_key_digest")),
    authorKeyDigest: bytesOf(data, get("author_key_digest")),
    chipId: bytesOf(data, get("chip_id")),
    reportedTcb: bytesOf(data, get("reported_tcb")),
    signatureR,
    signatureS,
    unsigned: signingKey === layout.signingKeys.none || (zero(signatureR) && zero(signatureS)),
  };
}

/** The IEEE P1363 form WebCrypto verifies: R || S, 48 big-endian bytes each; null when a
 * component does not fit (such a signature cannot verify). */
export function p1363Signature(report, componentBytes) {
  const out = new Uint8Array(2 * componentBytes);
  for (const [index, little] of [report.signatureR, report.signatureS].entries()) {
    if (!zero(little.subarray(componentBytes))) return null;
    for (let i = 0; i < componentBytes; i += 1) out[index * componentBytes + componentBytes - 1 - i] = little[i];
  }
  return out;
}

export function reportSummary(report) {
  return { version: report.version, measurement: hex(report.measurement), hostData: hex(report.hostData) };
}
