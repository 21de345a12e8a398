-- The GPU catalog: memory in MiB (nominal GiB x 1024), SMs of the whole GPU,
-- board TDP. MIG profiles and placement rules arrive with the packing core.
INSERT INTO gpu_models (name, memory_mib, sm_count, tdp_watts, mig_capable) VALUES
  ('A100-40GB',   40960, 108, 400, true),
  ('A100-80GB',   81920, 108, 400, true),
  ('H100-80GB',   81920, 132, 700, true),
  ('H200-141GB', 144384, 132, 700, true),
  ('L4',          24576,  58,  72, false),
  ('L40S',        49152, 142, 350, false),
  ('A10',         24576,  72, 150, false),
  ('T4',          16384,  40,  70, false),
  ('V100M16',     16384,  80, 300, false),
  ('V100M32',     32768,  80, 300, false),
  ('P100',        16384,  56, 250, false);
