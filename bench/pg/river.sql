BEGIN;
INSERT INTO river.river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
VALUES ('{"payload":"0123456789012345678901234567890123456789012345678901234567890123"}', 'bench', 25, '{}', 1, 'default', now() + interval '1 hour', 'scheduled', '{}')
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL AND river.river_job_state_in_bitmask(unique_states, state)
DO UPDATE SET kind = EXCLUDED.kind RETURNING *;
END;
