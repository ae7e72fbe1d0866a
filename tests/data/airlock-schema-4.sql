BEGIN TRANSACTION;
CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        capability TEXT NOT NULL,
        params_json TEXT NOT NULL,
        ttl_s INTEGER NOT NULL,
        reason TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'used')),
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        decided_at REAL,
        decided_by TEXT,
        grant_id TEXT
    );
INSERT INTO "approvals" VALUES('a1','t1','s1','http','{"host": "x.example.com"}',600,'please','pending',1700000006.0,1700000306.0,NULL,NULL,NULL);
CREATE TABLE artifacts (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        size INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        tenant TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (run_id, path)
    );
INSERT INTO "artifacts" VALUES('r2','out/a.txt',6,'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa','text/plain','t1',1700000011.0);
CREATE TABLE drills (
        id TEXT PRIMARY KEY,
        target TEXT NOT NULL,
        tenant TEXT NOT NULL,
        started_at REAL NOT NULL,
        finished_at REAL NOT NULL,
        held INTEGER NOT NULL,
        failed INTEGER NOT NULL,
        not_applicable INTEGER NOT NULL,
        sessions_json TEXT NOT NULL,
        rows_json TEXT NOT NULL
    );
INSERT INTO "drills" VALUES('d1','default','airlock-drill',1700000007.0,1700000008.0,3,0,1,'["sd1"]','[{"attack": "dns", "expected": "deny", "held": true, "observed": "deny"}]');
CREATE TABLE egress_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        time REAL NOT NULL,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        capability TEXT,
        method TEXT NOT NULL,
        host TEXT NOT NULL,
        port INTEGER NOT NULL,
        path TEXT NOT NULL,
        status INTEGER NOT NULL,
        bytes_in INTEGER NOT NULL,
        bytes_out INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL,
        decision TEXT NOT NULL,
        reason TEXT NOT NULL,
        resolved_ip TEXT,
        injected_json TEXT NOT NULL
    );
INSERT INTO "egress_log" VALUES(1,1700000010.5,'t1','s1','r2','policy:default','GET','api.example.com',443,'/v1?key',200,100,50,12,'allow','allowed','93.184.216.34','["Authorization"]');
CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        capability TEXT NOT NULL,
        params_json TEXT NOT NULL,
        scope_json TEXT NOT NULL,
        approved_by TEXT NOT NULL,
        reason TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        revoked_at REAL
    );
INSERT INTO "grants" VALUES('g1','t1','s1','http','{"host": "api.example.com"}','{"hosts": ["api.example.com"], "ports": [443]}','operator','needs it',1700000004.0,1700003604.0,1700000005.0);
CREATE TABLE hatch_copies (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        root TEXT NOT NULL,
        root_path TEXT NOT NULL,
        dest TEXT NOT NULL,
        baseline_sha256 TEXT NOT NULL,
        files INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        version INTEGER NOT NULL,
        created_at REAL NOT NULL
    );
INSERT INTO "hatch_copies" VALUES('c1','t1','s1','repo','/home/u/repo','repo','9999999999999999999999999999999999999999999999999999999999999999',2,20,2,1700000013.0);
CREATE TABLE hatch_patches (
        id TEXT PRIMARY KEY,
        copy_id TEXT NOT NULL REFERENCES hatch_copies (id),
        tenant TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created_at REAL NOT NULL,
        version INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        entries_json TEXT NOT NULL,
        held_back_json TEXT NOT NULL,
        refused_json TEXT NOT NULL,
        ignored_json TEXT NOT NULL
    , source_sha256 TEXT NOT NULL DEFAULT '');
INSERT INTO "hatch_patches" VALUES('p1','c1','t1','s1',1700000014.0,2,'8888888888888888888888888888888888888888888888888888888888888888',40,'[{"change": "modified", "path": "x.py"}]','[]','[]','["__pycache__/x.pyc"]','7777777777777777777777777777777777777777777777777777777777777777');
INSERT INTO "hatch_patches" VALUES('p2','c1','t1','s1',1700000014.0,2,'8888888888888888888888888888888888888888888888888888888888888888',40,'[{"change": "modified", "path": "x.py"}]','[]','[]','["__pycache__/x.pyc"]','7777777777777777777777777777777777777777777777777777777777777777');
CREATE TABLE run_inputs (
        run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        PRIMARY KEY (run_id, path)
    );
INSERT INTO "run_inputs" VALUES('r2','in.txt','bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb',3);
CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id),
        tenant TEXT NOT NULL,
        language TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('running', 'ok', 'error', 'timeout', 'oom', 'killed')),
        created_at REAL NOT NULL,
        timeout_s INTEGER NOT NULL,
        limits_json TEXT NOT NULL,
        code_sha256 TEXT NOT NULL,
        finished_at REAL,
        duration_ms INTEGER,
        exit_code INTEGER,
        cpu_seconds REAL,
        peak_memory_bytes INTEGER,
        stdout_bytes INTEGER NOT NULL DEFAULT 0,
        stdout_sha256 TEXT,
        stderr_bytes INTEGER NOT NULL DEFAULT 0,
        stderr_sha256 TEXT,
        error TEXT,
        runtime TEXT NOT NULL DEFAULT '',
        instance_id TEXT NOT NULL DEFAULT ''
    );
INSERT INTO "runs" VALUES('r1','s1','t1','python','running',1700000010.0,30,'{"memory_bytes": 5368709120, "pids": 64}','cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc',NULL,NULL,NULL,NULL,NULL,0,NULL,0,NULL,NULL,'runsc','i-old');
INSERT INTO "runs" VALUES('r2','s1','t1','python','ok',1700000010.0,30,'{"memory_bytes": 5368709120, "pids": 64}','cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc',1700000011.0,1000,0,0.25,3221225472,6,'dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd',0,NULL,NULL,'runsc','i-old');
CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        tenant TEXT NOT NULL,
        created_at REAL NOT NULL,
        last_used_at REAL NOT NULL,
        expires_at REAL NOT NULL,
        ended_at REAL,
        end_reason TEXT,
        containers_removed INTEGER NOT NULL DEFAULT 0
    );
INSERT INTO "sessions" VALUES('s1','t1',1700000000.125,1700000001.5,1700000600.25,NULL,NULL,0);
INSERT INTO "sessions" VALUES('s2','t2',1700000002.0,1700000002.0,1700000602.0,1700000003.0,'ended by the agent',1);
CREATE TABLE workspace_changes (
        session_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        path TEXT NOT NULL,
        deleted INTEGER NOT NULL,
        kind TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL,
        mode INTEGER NOT NULL,
        mtime INTEGER NOT NULL,
        written_by TEXT,
        PRIMARY KEY (session_id, version, path),
        FOREIGN KEY (session_id, version)
            REFERENCES workspace_versions (session_id, version) ON DELETE CASCADE
    );
INSERT INTO "workspace_changes" VALUES('s1',1,'gone.txt',0,'file','ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff',1,420,0,'r1');
INSERT INTO "workspace_changes" VALUES('s1',1,'src',0,'dir','',0,493,1700000009,'r1');
INSERT INTO "workspace_changes" VALUES('s1',1,'src/x.py',0,'file','eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee',10,384,1700000009,'r1');
INSERT INTO "workspace_changes" VALUES('s1',2,'gone.txt',1,'file','',0,0,0,'r2');
CREATE TABLE workspace_files (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        sha256 TEXT NOT NULL,
        size INTEGER NOT NULL, kind TEXT NOT NULL DEFAULT 'file' CHECK (kind IN ('file', 'dir')), mode INTEGER NOT NULL DEFAULT 420, mtime INTEGER NOT NULL DEFAULT 0, written_by TEXT, version INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (session_id, path)
    );
INSERT INTO "workspace_files" VALUES('s1','src','',0,'dir',493,1700000009,'r1',1);
INSERT INTO "workspace_files" VALUES('s1','src/x.py','eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee',10,'file',384,1700000009,'r1',1);
CREATE TABLE workspace_versions (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        version INTEGER NOT NULL,
        base_version INTEGER NOT NULL,
        written_by TEXT,
        created_at REAL NOT NULL,
        PRIMARY KEY (session_id, version)
    );
INSERT INTO "workspace_versions" VALUES('s1',1,0,'r1',1700000009.0);
INSERT INTO "workspace_versions" VALUES('s1',2,1,'r2',1700000012.0);
CREATE INDEX runs_by_session ON runs (session_id, created_at);
CREATE INDEX runs_by_tenant ON runs (tenant, created_at);
CREATE INDEX egress_by_run ON egress_log (run_id, seq);
CREATE INDEX egress_by_session ON egress_log (session_id, seq);
CREATE INDEX grants_by_tenant ON grants (tenant, created_at);
CREATE INDEX approvals_by_status ON approvals (status, created_at);
CREATE INDEX patches_by_copy ON hatch_patches (copy_id, sha256);
DELETE FROM "sqlite_sequence";
INSERT INTO "sqlite_sequence" VALUES('egress_log',1);
COMMIT;
PRAGMA user_version = 4;
