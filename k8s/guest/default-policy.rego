package agent_policy

# Default Kata agent policy for the guest image that runs attested-replay pods.
#
# Install it as the image's default policy (kata tools/osbuilder: AGENT_POLICY=yes
# AGENT_POLICY_FILE=<this file>, which links it to /etc/kata-opa/default-policy.rego). The agent
# uses it only when the host attaches no init-data: with init-data it loads init-data's
# policy.rego instead, before it answers any request. A guest that runs without init-data must
# refuse everything, because HOST_DATA is whatever the host gives the PSP and nothing in the
# guest compares it with anything when there is no init-data. kata's stock images install
# allow-all.rego here: booted with HOST_DATA copied from a genuine run and no init-data, such a
# guest would run any container and let it ask the attestation agent for a report.
#
# Valid Rego v0 and v1 (kata 3.29: regorus 0.2, kata 4.x: regorus 0.9).

default AllowRequestsFailingPolicy := false

default AddARPNeighborsRequest := false
default AddSwapPathRequest := false
default AddSwapRequest := false
default CloseStdinRequest := false
default CopyFileRequest := false
default CreateContainerRequest := false
default CreateSandboxRequest := false
default DestroySandboxRequest := false
default ExecProcessRequest := false
default GetDiagnosticDataRequest := false
default GetIPTablesRequest := false
default GetMetricsRequest := false
default GetOOMEventRequest := false
default GuestDetailsRequest := false
default ListInterfacesRequest := false
default ListRoutesRequest := false
default MemAgentCompactConfig := false
default MemAgentMemcgConfig := false
default MemHotplugByProbeRequest := false
default OnlineCPUMemRequest := false
default PauseContainerRequest := false
default PullImageRequest := false
default ReadStreamRequest := false
default RemoveContainerRequest := false
default RemoveStaleVirtiofsShareMountsRequest := false
default ReseedRandomDevRequest := false
default ResizeVolumeRequest := false
default ResumeContainerRequest := false
default SetGuestDateTimeRequest := false
default SetIPTablesRequest := false
default SetPolicyRequest := false
default SignalProcessRequest := false
default StartContainerRequest := false
default StartTracingRequest := false
default StatsContainerRequest := false
default StopTracingRequest := false
default TtyWinResizeRequest := false
default UpdateContainerRequest := false
default UpdateEphemeralMountsRequest := false
default UpdateInterfaceRequest := false
default UpdateRoutesRequest := false
default VolumeStatsRequest := false
default WaitProcessRequest := false
default WriteStreamRequest := false
