"""The attestation envelope: its wire model, the REPORT_DATA binding, the tenant's expected
values, envelope-mode verification and the JSON Schemas generated from the models."""
