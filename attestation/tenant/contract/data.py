"""The verification contract itself: the one source of "what can I verify?".

``docs/verification-contract.md`` is generated from it (``python scripts/gen_contract_doc.py``;
a test fails when they drift), ``attested-replay contract [--json]`` prints it and the trust
panel of ``attested-replay serve`` shows it (``GET /v1/contract``, rendered by the panel's
``contract.js``); ``tests/panel/test_contract_renderings.py`` finds every part of it in all
four. Edit the contract here; refer to a row as ``{row:ID}``, never by its number.
"""

from __future__ import annotations

from typing import Final

from attestation.tenant.contract.model import (
    Assurance,
    Availability,
    ChainLink,
    Comparison,
    Contract,
    Headings,
    Labels,
    NotVerifiable,
    Party,
    Reference,
    Row,
    Term,
    Threat,
)

CONTRACT_VERSION: Final = "1"

_VERIFY = "verify-attested-run --envelope E --expected X"

#: The chain a tenant pins, link by link: each pinned link vouches for the next.
TENANT_CHECKLIST: Final = (
    ChainLink(
        link="launch measurement: the guest's firmware, kernel, root filesystem (its dm-verity "
        "root hash is on the command line) and command line, hence the Kata agent",
        pin="`measurements`: `attested-replay measure` on the release's guest files, then "
        "`expected --measurement`, one value per node size or vCPU type",
        proves="the report comes from the guest the tenant trusts, whose agent enforces the "
        "init-data policy and whose default policy refuses everything without it",
        without="any guest: Kata's stock image booted with the genuine HOST_DATA and no "
        "init-data lets the operator run its own command; `verify-attested-run` refuses a "
        "hardware file without it (exit 6) unless `acceptAnyMeasurement` is set",
        see=(
            Reference(
                doc="operator.md",
                anchor="111-measurement-attested-replay-measure",
                label="measuring the guest",
            ),
        ),
    ),
    ChainLink(
        link="HOST_DATA: the init-data (agent policy, attestation-agent and CDH configuration)",
        pin="`hostData`: `expected --image ... --overlay snp --corpus-source ...`, from the "
        "run parameters `submit` is given",
        see=(
            Reference(
                doc="operator.md",
                anchor="112-host_data-attested-replay-init-data-and-attested-replay-expected",
                label="HOST_DATA",
            ),
        ),
        proves="the agent admitted only this Job's replay container, with these arguments, "
        "and the CDH admits only the pinned image",
        without="the operator chooses the policy: any container, command or exec in the guest",
    ),
    ChainLink(
        link="image digest",
        pin="`imageDigest` (from `--image`; the CDH policy in HOST_DATA admits only it)",
        proves="the container that ran is this image, byte for byte",
        without="any image the policy admits; with `hostData` pinned, still the pinned one",
    ),
    ChainLink(
        link="source: the code that image was built from",
        pin="rebuild the image from the source and compare digests; `workloadDigest` "
        "(`expected --this-workload`) pins the code digest the run reports",
        proves="the scoring code is the published source",
        without="the tenant trusts whoever built the image",
    ),
    ChainLink(
        link="corpus: the cases and their labels",
        pin="`corpusChecksum`: `expected --corpus DIR|ARCHIVE` (the approved corpus or its export)",
        proves="the run scored exactly these cases",
        without="another corpus",
    ),
    ChainLink(
        link="evaluation: plan, marks and the run records (predictions)",
        pin="`evaluationDigest`: `expected --corpus DIR|ARCHIVE` pins it with the checksum",
        proves="the predictions scored and the pass marks applied are the approved ones",
        without="edited predictions or lowered marks give a genuine envelope with another "
        "result; `verify-attested-run` refuses a file without it (exit 8) unless "
        "`acceptAnyEvaluation` is set",
    ),
    ChainLink(
        link="result",
        pin="the binding's `resultDigest` (checked by `verify-attested-run`); `tenant "
        "reproduce` recomputes it from the corpus; `resultDigest` pins a value known in "
        "advance",
        proves="the numbers are what this code computes from these inputs",
        without="nothing more is lost once the links above are pinned; reproducing needs no "
        "hardware at all",
    ),
)

CONTRACT: Final = Contract(
    version=CONTRACT_VERSION,
    title="Verification contract: what a tenant can check, with what, trusting whom",
    headings=Headings(
        terms="Definitions",
        matrix="Matrix",
        threat_model="Operator threat model",
        checklist="The tenant's checklist: from the hardware to the result",
        not_verifiable="Not verifiable (and when to revisit)",
        comparison="Self-host operator vs hosted tenant",
        panel_limits="What the trust panel cannot check",
    ),
    labels=Labels(
        claim="claim",
        artifact="artifact",
        command="command",
        who="who can run it",
        assumption="trust assumption",
        hosted="hosted tenant can check it",
        availability={
            Availability.YES: "yes",
            Availability.WITH_OPERATOR: "with the operator's help",
            Availability.NO: "no",
        },
        controls="the operator controls",
        attempts="it can try to",
        defence="what attested-replay does",
        link="link",
        pin="pin it with",
        proves="a pinned link proves",
        without="without it",
        revisit="Revisit when",
        self_host="self-host operator (runs replays, the service and the corpus itself)",
        hosted_tenant="hosted tenant (another party runs them)",
        see="Exit codes",
    ),
    summary=(
        (
            'One answer to "what can I actually verify?" for attested-replay. Each row of the '
            "matrix is a claim the project makes, the artifact that carries the proof, the command "
            "that checks it, who can run that command, and what the check still has to assume. "
            "Anything not built is listed as not verifiable, with the event that should make us "
            "revisit it. Commands exit 0 only when the check passed."
        ),
        (
            "This contract is data in the package, and every rendering of it shows all of it: "
            "`attested-replay contract` (text) and `attested-replay contract --json`, the docs "
            "page `docs/verification-contract.md`, `GET /v1/contract` of `attested-replay serve` "
            "and the trust panel it shows at `/panel/`."
        ),
    ),
    terms=(
        Term(
            name="tamper-proof",
            meaning="changing the artifact without detection needs breaking a cryptographic "
            "primitive or extracting a key from AMD hardware",
        ),
        Term(
            name="tamper-evident",
            meaning="a party that keeps state (a checkpoint) detects a change on its next "
            "check; a party that kept nothing, or whom the operator lied to from the start, "
            "does not",
        ),
        Term(
            name="recomputed",
            meaning="the tenant derives the value again on its own machine from its own copy "
            "of the inputs; nothing the operator or any hardware says is trusted",
        ),
    ),
    rows=(
        Row(
            id="attested-execution",
            claim="Attested execution",
            statement="the replay ran the measured workload inside a genuine AMD SEV-SNP "
            "guest, with debug disabled and a TCB at or above the policy",
            artifact="envelope: `evidence.report` (1184-byte SNP report) and "
            "`evidence.certChain` (VCEK/VLEK, ASK/ASVK)",
            commands=(_VERIFY,),
            command_note="offline; exits 1-6 name the failing class",
            who=(Party.ANYONE, Party.TENANT),
            who_detail="anyone holding the envelope: the tenant, an auditor it hands the "
            "envelope to; no contact with the operator",
            assurance=Assurance.TAMPER_PROOF,
            assumption="Holds under AMD's roots (pinned in the package by SHA-256) and the SNP "
            "firmware's correctness. The `measurements`/`hostData` allowlists in `X` decide "
            "which workload counts; the tenant must obtain them from a build it trusts. "
            "`hostData` from `attested-replay expected --image ...` pins the Job's init-data, "
            "whose Kata agent policy admits only that Job's replay container (its command, "
            "arguments, environment and mounts; no exec, no other container), so a genuine "
            "report with that HOST_DATA can only come from the replay itself, provided the "
            "pinned MEASUREMENT is of a guest image whose default agent policy refuses every "
            "request: a guest booted without its init-data keeps that default while HOST_DATA, "
            "which the host sets, still matches (see the guest image). Proves "
            "computation, never data provenance. Envelopes with `platform: simulated` prove "
            "nothing about hardware and verify only when `X` lists their root in "
            "`simulatedRoots`.",
            hosted=Availability.YES,
            see=(
                Reference(doc="verification.md", anchor="exit-codes", label="exit codes"),
                Reference(
                    doc="operator.md",
                    anchor="22-the-guest-image-a-default-policy-that-refuses-everything",
                    label="the guest image",
                ),
            ),
        ),
        Row(
            id="binding",
            claim="Binding",
            statement="this report was produced for this run ID, tenant, corpus checksum, "
            "evaluation, workload and result",
            artifact="`binding` and `reportData`: REPORT_DATA = SHA-512(JCS(binding)) (or the "
            "`sha256-hex` encoding), requested after scoring",
            commands=(_VERIFY,),
            command_note="binding failures exit 7; a different run, corpus, tenant, workload, "
            "result, evaluation, image, nonce or shard count than `X` exits 8",
            who=(Party.TENANT,),
            who_detail="tenant (it writes `X`: `attested-replay expected`)",
            assurance=Assurance.TAMPER_PROOF,
            assumption="Given {row:attested-execution}: the hash is inside the "
            "hardware-signed report. Says nothing about whether the corpus is the right data: "
            "that is {row:corpus-and-result} and {row:published-numbers}.",
            hosted=Availability.YES,
            see=(Reference(doc="envelope.md", anchor="report_data", label="REPORT_DATA"),),
        ),
        Row(
            id="corpus-and-result",
            claim="Corpus and result integrity",
            statement="the replay scored exactly the corpus the tenant has, and the result is "
            "the published one",
            artifact="`binding.corpusChecksum`, `binding.resultDigest`, `result`",
            commands=("attested-replay corpus checksum DIR",),
            command_note="on the tenant's copy, then compare in `X` (`corpusChecksum`, "
            "`resultDigest`); `verify-attested-run` exits 8 on a mismatch",
            who=(Party.TENANT,),
            who_detail="tenant with the corpus (a private corpus is only in the tenant's and "
            "the operator's hands)",
            assurance=Assurance.TAMPER_PROOF,
            assumption='For "same bytes". Does not establish that the corpus\' labels are '
            "honest (ground truth is not verifiable, below).",
            hosted=Availability.YES,
            see=(Reference(doc="replay.md", anchor="2-corpus-checksum", label="corpus checksum"),),
        ),
        Row(
            id="published-numbers",
            claim="Published numbers, re-derived",
            statement="the result's numbers are what the published scoring code computes from "
            "the tenant's corpus, whoever ran it and on whatever hardware",
            artifact="the tenant's corpus or its export (a deterministic `.tar.gz` whose manifest "
            "carries the corpus checksum and each file's SHA-256) and the envelope's "
            "`binding` (corpus checksum, evaluation digest, result digest, workload code "
            "digest)",
            commands=(
                "attested-replay tenant fetch ... --corpus",
                "attested-replay tenant reproduce --envelope E --corpus DIR|ARCHIVE",
            ),
            command_note="`reproduce` checks the corpus checksum against the binding, re-runs "
            "the scoring with the same code path as `run` and compares the evaluation and "
            "result digests: exit 8 names a different corpus or evaluation, exit 7 a bound "
            "result that this code does not compute from these inputs",
            who=(Party.TENANT,),
            who_detail="tenant, with its own copy of the corpus (then it needs nothing from "
            "the operator) or the export the service holds for it, served to its token only",
            assurance=Assurance.RECOMPUTED,
            assumption="Trusts no hardware at all: closes corpus tampering and numbers not "
            "from the published code for whoever runs it. Assumes the scoring code the tenant "
            "runs is the published one (`reproduce` compares its code digest with the "
            "envelope's `workload.codeDigest` and says when they differ) and that scoring is "
            "deterministic (it is: exact integers and decimals, no clock, no randomness). Does "
            "not establish that the labels are true.",
            hosted=Availability.YES,
            see=(Reference(doc="reproduce.md", label="corpus export and reproduce"),),
        ),
        Row(
            id="envelope-identity",
            claim="Envelope identity",
            statement="the envelope a tenant holds is the one published, byte for byte",
            artifact="`sha256:<hex>` of the exact bytes: the storage name, `ETag`, "
            "`Content-Digest`, and the log entry",
            commands=("sha256sum DIR/envelopes/sha256-<hex>.json",),
            command_note="`tenant fetch` checks every download",
            who=(Party.TENANT,),
            who_detail="tenant (token role `tenant`)",
            assurance=Assurance.TAMPER_PROOF,
            assumption="SHA-256 of the exact bytes.",
            hosted=Availability.YES,
        ),
        Row(
            id="publication-integrity",
            claim="Publication integrity",
            statement="no published envelope was removed, reordered or rewritten, and the log "
            "did not fork, since the tenant's last fetch",
            artifact="per-tenant RFC 6962 log of entries `{envelope, runId, tenant, v}`, C2SP "
            "checkpoint signed with the log's Ed25519 key; the kept tree's right edge (from "
            "the log's C2SP tlog-tiles hash tiles) extended with every new entry must give the "
            "signed root",
            commands=(
                (
                    "attested-replay tenant fetch --server URL --token-file F --tenant T --out DIR "
                    "--log-key KEY"
                ),
            ),
            command_note="exit 7 = tampering",
            who=(Party.TENANT,),
            who_detail="tenant (token role `tenant`), with the verifier key pinned out of band",
            assurance=Assurance.TAMPER_EVIDENT,
            assumption="Not tamper-proof: relative to the checkpoint the tenant kept: history "
            "before its first fetch is taken on trust, and the operator holds the signing "
            "key, so it could show one tenant fetcher a different (self-consistent) log than "
            "another; comparing checkpoints across fetchers, or a witness, catches that. "
            "Withholding (refusing to serve) is visible, not prevented.",
            hosted=Availability.YES,
            see=(Reference(doc="publishing.md", anchor="tenant-fetch", label="tenant fetch"),),
        ),
        Row(
            id="witnessed-publication",
            claim="One history for every tenant fetcher",
            statement="the log a tenant fetches is the one the witnesses it pins saw: no split "
            "view, and no history before its first fetch that they did not see",
            artifact="the latest cosigned checkpoint (`GET .../log/checkpoint/cosigned`): the "
            "log's C2SP checkpoint with C2SP `cosignature/v1` lines by witnesses that each "
            "cosign only a checkpoint whose consistency proof extends the last one they "
            "cosigned (`attested-replay witness serve`, C2SP tlog-witness)",
            commands=(
                (
                    "attested-replay tenant fetch ... --witness-key W1 --witness-key W2 "
                    "--witness-threshold 2"
                ),
            ),
            command_note="exit 7 when fewer than the threshold of pinned witnesses cosigned, "
            "naming them; the witness keys are pinned in DIR once given",
            who=(Party.TENANT,),
            who_detail="tenant, with the witnesses' keys pinned out of band",
            assurance=Assurance.TAMPER_EVIDENT,
            assumption="At least one of any T of the pinned witnesses is honest and "
            "independent of the operator (fewer than T collude with it; with T equal to the "
            "number pinned, one honest witness suffices; a witness the operator runs adds "
            "nothing). A split view then needs T of them to collude; two fetchers are held to "
            "one history through a witness they both pin. What the witnesses cosign is the "
            "history from the log's first entry, so a tenant's first fetch is covered too.",
            hosted=Availability.YES,
            see=(Reference(doc="witness.md", label="witnesses"),),
        ),
        Row(
            id="publish-receipt",
            claim="Publish receipt",
            statement="this envelope was in the log at index i when it was published",
            artifact="receipt: `logIndex`, `treeSize`, signed `checkpoint`, `inclusionProof` "
            "and, once witnesses cosigned a tree holding the entry, `cosigned` (that "
            "checkpoint and the entry's proof under it) (`attested-replay publish` output)",
            commands=("attested-replay tenant fetch ... --checkpoint RECEIPT_CHECKPOINT",),
            command_note="the publisher checks the proof against the checkpoint root; the "
            "fetch proves today's log extends that checkpoint",
            who=(Party.OPERATOR, Party.TENANT),
            who_detail="operator (holds the receipt); tenant, if the operator passes the "
            "receipt on",
            assurance=Assurance.TAMPER_EVIDENT,
            assumption="As {row:publication-integrity}, anchored at the receipt's checkpoint "
            "instead of the tenant's last fetch.",
            hosted=Availability.WITH_OPERATOR,
        ),
        Row(
            id="commitment-scope",
            claim="Commitment scope",
            statement="what the digests pin",
            artifact="`workload.codeDigest` (the Python sources that scored), MEASUREMENT and "
            "HOST_DATA (the guest image and its init data), `evaluationDigest`; "
            "`imageDigest` (bound by `submit` from the Job's pinned image)",
            commands=(_VERIFY,),
            command_note="`X` may pin `imageDigest`: exit 8 when it differs or is absent",
            who=(Party.TENANT,),
            who_detail="tenant",
            assurance=Assurance.TAMPER_PROOF,
            assumption="For the code and inputs in force: another corpus, evaluation plan, "
            "scoring code or guest image gives another digest. `imageDigest` is only the "
            "operator's statement (a guest cannot read its own image digest); the image is "
            "enforced through init-data's image policy, i.e. HOST_DATA, and the tenant ties "
            "that digest to source by rebuilding the image from the tagged source "
            "(`attested-replay image build`) and comparing. They pin nothing "
            "outside the guest: the host, other tenants' jobs, or when the replay ran (the "
            "report carries no trusted time: the tenant pins a nonce of its own choosing, "
            "`submit --nonce N` and `expected --nonce N`, for freshness).",
            hosted=Availability.YES,
            see=(
                Reference(doc="image.md", anchor="the-tenants-path", label="rebuilding the image"),
            ),
        ),
        Row(
            id="azure-confidential-vm",
            claim="Azure confidential VMs",
            statement="an envelope with `evidence.kind: az-snp-vtpm` (peer pods on Azure) was "
            "produced in a genuine AMD SEV-SNP confidential VM whose vTPM quoted this run's "
            "binding hash, and, when `X` pins `initDataDigest`, that VM measured this "
            "init-data into PCR 8",
            artifact="`evidence.report` (the 2600-byte HCL report: the paravisor's SNP report "
            "and the variable data with the vTPM attestation key), `evidence.vtpm` (TPM quote, "
            "its signature, the PCR values), `evidence.certChain`",
            commands=(_VERIFY,),
            command_note="a quote over another nonce or PCR values it does not cover exit 7, "
            "a quote not signed by the key the report binds exits 3, PCR 8 of other "
            "init-data exits 6",
            who=(Party.ANYONE, Party.TENANT),
            who_detail="anyone holding the envelope; the tenant for `initDataDigest` "
            "(`attested-replay expected --overlay peer-pods ...` or `--init-data-digest`)",
            assurance=Assurance.TAMPER_PROOF,
            assumption="Holds under AMD's roots and, beyond them, Azure's paravisor (HCL), "
            "which is part of the trusted base: it runs at VMPL 0, requests the SNP report "
            "at boot, creates the vTPM and its attestation key and writes the key into the "
            "report's variable data. The hardware signs the paravisor's report, not the pod "
            "VM's: MEASUREMENT is Azure's firmware image, HOST_DATA is zero, and the pod "
            "VM's code is pinned only through the vTPM: PCR 8 holds the init-data digest as "
            "the attestation agent extended it (the agent policy in that init-data is what "
            "admits only the replay), trusting the paravisor's vTPM to have measured "
            "honestly. PCRs 0-7 (the pod VM's boot) are carried but not compared with "
            "reference values. Without `initDataDigest`, nothing ties the envelope to the "
            "agent policy. Freshness and the rest of the binding are as in {row:binding} and "
            "{row:commitment-scope}.",
            hosted=Availability.YES,
            see=(
                Reference(
                    doc="verification.md",
                    anchor="azure-confidential-vms-az-snp-vtpm-evidence",
                    label="az-snp-vtpm checks",
                ),
            ),
        ),
    ),
    not_verifiable=(
        NotVerifiable(
            id="live-decisions",
            title="Live decisions",
            detail="Only offline backtest replays are attested; whatever acts on live data is not.",
            revisit="a tenant contractually requires attested live decisions, not merely "
            "prefers them",
        ),
        NotVerifiable(
            id="ground-truth",
            title="Ground truth",
            detail="A corpus' labels are recorded by people on the operator's or tenant's "
            "infrastructure; attestation and reproduction prove the replay scored these "
            "labels, not that they are true.",
            revisit="a tenant disputes recorded labels in a way a replay cannot settle",
        ),
        NotVerifiable(
            id="log-replacement",
            title="Wholesale log replacement after key loss or compromise",
            detail="A new key or a new log shows up as a refusal (exit 9 for a changed key, "
            "exit 7 for a log that does not extend the kept checkpoint), which is detection, "
            "not prevention.",
            revisit="a tenant needs its history carried over a key change: pinned witnesses "
            "(`tenant fetch --witness-key`) refuse to cosign a replaced log, so it lacks their "
            "cosignatures, but the tenant still learns of it only as a refusal",
        ),
        NotVerifiable(
            id="availability",
            title="Availability",
            detail="The service can withhold envelopes and corpus exports or refuse to serve; "
            "the spool and the tenant's local store limit the damage but cannot force "
            "publication.",
            revisit="a tenant needs delivery guarantees (replication to a tenant-owned bucket "
            "via `dir://` is a start)",
        ),
        NotVerifiable(
            id="third-party-reproduction",
            title="Reproduction of a private corpus by third parties",
            detail="A private corpus is in the tenant's and the operator's hands only; nobody "
            "else can re-derive its numbers unless the tenant hands the corpus or its export on.",
            revisit="a tenant asks for a public or auditor-scoped export",
        ),
        NotVerifiable(
            id="simulated-mode",
            title="Simulated mode",
            detail="Simulated envelopes exercise every code path and verify only with an "
            "explicitly pinned simulated root; they prove nothing about hardware.",
            revisit="SEV-SNP nodes run the replay Jobs in production",
        ),
        NotVerifiable(
            id="non-determinism",
            title="Reproducibility of models or anything non-deterministic",
            detail='A digest match means "same inputs"; only deterministic scoring gives '
            '"same output".',
            revisit="non-deterministic components enter the scoring path",
        ),
    ),
    threat_model=(
        (
            "The party this contract protects the tenant from is the operator: whoever runs the "
            "cluster, the hosts, the network, the publication service and the corpus server. The "
            "attestation is worth something only if nothing the operator controls can change a "
            "verdict without changing a digest the tenant pins ({row:binding}, "
            "{row:corpus-and-result}, {row:commitment-scope}), and if nothing it controls can make "
            "a run misbehave in a way that is not a refusal. Every input below "
            "is therefore hostile: bounded in size and time, checked before expensive work, and "
            "every failure ends with a specific error naming the input and the bound, a non-zero "
            "exit code, and no envelope."
        ),
        (
            "Out of scope: the tenant's own machine, AMD's hardware and firmware (the assumption "
            "of {row:attested-execution}), and denial of service: the operator can always refuse "
            "to run or publish a replay; what it cannot do is make one produce a verifying "
            "envelope for another result."
        ),
    ),
    threats=(
        Threat(
            controls="the corpus: a directory, or an `https://` archive and the server behind it",
            attempts="change what is scored without changing the digests; exhaust memory, disk "
            "or time with a compression bomb, a sparse or linked entry, 400,000 entries, a FIFO "
            "or `/dev/zero` in place of a file",
            defence="every digest is recomputed in the TEE from the bytes scored, numbers "
            "included; the archive is unpacked in one stream with entry, header, total and ratio "
            "bounds checked as it arrives; only regular files are opened, never with a blocking "
            "`open`; a byte order mark is refused",
            see=(Reference(doc="limits.md", label="limits"),),
        ),
        Threat(
            controls="the network: DNS, routing, TLS interception, anything answering in place of "
            "a server",
            attempts="stall a run (one byte a second, `Retry-After` of a day), send endless or "
            "giant answers or deeply nested JSON, redirect to a plain-http host, present a "
            "certificate of its own",
            defence="one HTTP client for every request: a deadline for the whole request enforced "
            "on every socket operation, a size cap sized to what the answer can be, `Retry-After` "
            "honoured up to 120 s, every redirect hop re-checked (`https`, or `http` only to "
            "loopback), TLS failures refused and never retried, strict JSON nested at most 32 "
            "levels",
            see=(Reference(doc="limits.md", anchor="http-requests", label="HTTP limits"),),
        ),
        Threat(
            controls="the pod's environment and mounts",
            attempts="redirect trust (`HTTPS_PROXY`, `REQUESTS_CA_BUNDLE`, `~/.netrc`, "
            "`SSLKEYLOGFILE`) or load code (`LD_PRELOAD`, `PYTHONPATH`, `OPENSSL_CONF`)",
            defence="the agent policy in init-data pins every variable and mount (it is pinned "
            "through HOST_DATA: {row:attested-execution}) and the process, an isolated "
            "interpreter (`python -I`: no `PYTHON*` variable, user site or working-directory "
            "module is read); on top of it the HTTP client reads no trust variable "
            "(`--ca-bundle` names another CA), a run with genuine evidence refuses to start "
            "while a code-loading variable is set, and every run records both in its log and "
            "summary",
            see=(Reference(doc="environment.md", label="environment variables"),),
        ),
        Threat(
            controls="the attestation agent's port, KDS and the publication service's answers",
            attempts="answer in place of them: a report over other data, a substituted "
            "certificate, an endless answer, a forked log",
            defence="the report must carry exactly the REPORT_DATA asked for (an az-snp-vtpm "
            "quote: as its nonce); a VCEK is kept only "
            "if it chains to the pinned roots and verifies the report; each answer is capped "
            "(agent evidence 256 KiB, a certificate 16 KiB, a checkpoint or proof 64 KiB, a page "
            "of entries 1 MiB, an envelope 16 MiB) and timed; the log's proofs are "
            "{row:publication-integrity} and {row:witnessed-publication}",
        ),
        Threat(
            controls="the host and hypervisor: configfs-tsm and `/dev/sev-guest`",
            attempts="answer the guest's report request with oversized, linked or blocking "
            "attributes",
            defence="each configfs attribute is read without following links and with the "
            "kernel's own cap (`outblob`, `auxblob`: 32 KiB); every length from the ioctl is "
            "bounded; the report is checked like any other",
        ),
    ),
    checklist=TENANT_CHECKLIST,
    checklist_intro=(
        (
            "Each link is pinned in the expected-values file (or checked by the step named) and "
            "vouches for the next; a link left unpinned is one the operator chooses."
        ),
    ),
    comparison=(
        Comparison(
            aspect="Verifies",
            self_host="every row locally: its own envelopes, corpus, database and log",
            hosted="every row marked for hosted tenants through artifacts it downloads: "
            "envelopes and corpus exports via `tenant fetch`, its corpus copy, AMD's roots; "
            "the publish receipt when the operator shares it",
        ),
        Comparison(
            aspect="Needs from the other side",
            self_host="nothing",
            hosted="a `tenant` token, the log's verifier key (received out of band and "
            "pinned), envelopes published to the service",
        ),
        Comparison(
            aspect="Trusts",
            self_host="AMD's roots and its own infrastructure: it is the operator",
            hosted="AMD's roots for execution (tamper-proof), nothing for re-derived numbers, "
            "and the operator's log honesty only up to the tamper-evident limit of "
            "publication integrity",
        ),
        Comparison(
            aspect="Gains from the log",
            self_host="an audit trail of what it published",
            hosted="detection of removed, reordered or rewritten envelopes and forks since its "
            "last kept checkpoint",
        ),
        Comparison(
            aspect="Cannot close",
            self_host="ground truth, live decisions",
            hosted="the same, plus split views and pre-first-fetch history unless it pins "
            "independent witnesses",
        ),
    ),
    comparison_note=(
        (
            "The hosted-tenant column is the one this contract exists for, and it is the weaker "
            "one; stating that plainly is the point. A tenant that keeps its checkpoint detects "
            "any replacement of published envelopes on its next fetch; what remains open is the "
            "case where it kept nothing, unless it pins independent witnesses."
        ),
    ),
    panel_limits=(
        (
            "The trust panel is served by the operator's server: every value on it is what that "
            "server says. It is a view, not a verification; run the commands it shows on your "
            "own machine."
        ),
        (
            "It checks each envelope's SEV-SNP evidence in your browser (report signature, chain "
            "to AMD's roots, platform policy, REPORT_DATA binding, and your expected values if "
            "you load them), but with code and roots the operator's server sent: a check made by "
            "code the operator serves proves nothing against the operator. It does not check the "
            "checkpoint signatures or the inclusion proofs. `tenant fetch` and "
            "`verify-attested-run` make these checks with the keys and roots you pinned."
        ),
        (
            "Witness cosignatures are checked against the witness keys you paste, by the same "
            "served code; whether a witness is one you trust only you can tell, and only your own "
            "verifier's check counts against the operator."
        ),
        (
            "Publication times (`publishedAt`) are the service's own clock when it integrated "
            'each envelope into the log, to the second in UTC ("not recorded" for envelopes an '
            "older service stored): the operator's statement, in nothing signed. Nothing in the "
            "log or the report attests to when a replay ran or was published."
        ),
        (
            "It cannot show what the operator withheld: an envelope or corpus export never "
            "published does not appear here or anywhere else."
        ),
    ),
    see=(
        Reference(doc="verification.md", anchor="exit-codes", label="verify-attested-run"),
        Reference(doc="replay.md", anchor="exit-codes-of-attested-replay", label="attested-replay"),
    ),
)
