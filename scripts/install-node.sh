#!/bin/sh
# install-node.sh joins this machine to a Switchyard gateway as a node: the
# inference engine (Ollama, unless another one already runs), the model, and
# switchyard-agent beside them, all as background services.
#
#   curl -fsSL https://raw.githubusercontent.com/switchyard-ai/switchyard/main/scripts/install-node.sh |
#     sh -s -- --gateway gw.example.com:9090 --node-id anna-mac --key syn_… --model gemma4:26b-a4b-it-qat
#
# Linux: a systemd system service when run as root, a user service otherwise.
# macOS: launchd LaunchAgents in the user's own Library; no administrator
# rights needed. Run it again to change a setting or to upgrade the agent: it
# touches only what changed, and puts the previous agent back when a new one
# does not start. --doctor explains what is wrong; --uninstall removes what
# it installed. --help lists every option.
#
# The gateway lists a node from its first accepted heartbeat. The script has
# no admin key to ask ListNodes with, so it watches the agent's own log
# (journald, or the LaunchAgent's log file) for the line that says the
# gateway accepted the heartbeat; when that does not come, it shows the log
# and the agent's doctor ("switchyard-agent doctor"), which says why.
#
# SWITCHYARD_INSTALL_ROOT, when set, is a directory treated as / for the
# system-wide paths (/etc, /usr/local, /var/lib); the tests run the script in
# such a throwaway tree.
#
# The whole script is read before anything runs (main is called on the last
# line), so commands that read standard input cannot eat the rest of it when
# it arrives through a pipe.

set -eu

RELEASES=https://github.com/switchyard-ai/switchyard/releases
OLLAMA_LINUX_INSTALLER=https://ollama.com/install.sh
OLLAMA_MAC_APP=https://ollama.com/download/Ollama-darwin.zip
OLLAMA_URL=http://127.0.0.1:11434
SERVICE_USER=switchyard
AGENT_UNIT=switchyard-agent.service
AWAKE_UNIT=switchyard-agent-awake.service
OLLAMA_UNIT=switchyard-ollama.service
AGENT_LABEL=ai.switchyard.agent
OLLAMA_LABEL=ai.switchyard.ollama
# The agent's own log lines that say how its start went.
LOG_ACCEPTED='the gateway accepted this node'
LOG_REFUSED='the gateway refused this node'
# Most a clock may differ from the gateway's before the doctor calls it a
# problem.
MAX_SKEW=60

usage() {
	cat <<'EOF'
Usage: install-node.sh --gateway HOST:PORT --node-id ID --key syn_… --model NAME [options]
       install-node.sh --doctor        say in plain words what is wrong
       install-node.sh --uninstall     remove what this script installed

Joining the gateway:
  --gateway HOST:PORT   the gateway's gRPC address (port 9090 unless published elsewhere)
  --node-id ID          this node's id, as its key was minted for (MintNodeKey)
  --key KEY             the node key, syn_…; SWITCHYARD_NODE_KEY or --key-file FILE keep it
                        out of the shell's history
  --key-file FILE       read the node key from FILE
  --tls, --no-tls       whether the gateway's address speaks TLS (default: plaintext)
  --model NAME          a model to pull and offer; repeat it, or separate names with commas

Engine:
  --engine KIND         ollama (default; installed when missing) or an engine already
                        running: vllm, sglang, tgi, llamacpp, openai
  --engine-url URL      where the engine listens (default: its usual local address)

Agent:
  --version VERSION     the agent release to install (default: the latest)
  --agent-url URL       the folder holding switchyard-agent-<os>-<arch> and checksums.txt
                        (default: the release's download folder)
  --agent-bin PATH      install this agent binary instead of downloading one
  --listen ADDR         the engine front's listen address (default :8081)
  --advertise-url URL   the front's URL as the gateway reaches it
  --expose cloudflared  reach the front through a Cloudflare quick tunnel
  --slots N             requests the engine runs at once per model (default: ask the engine)

Behaviour:
  --wait SECONDS        how long to wait for the gateway to list the node (default 60)
  --gateway-http URL    the gateway's HTTP address, for the doctor's clock check
                        (default http://HOST:8080, or https://HOST with --tls)
  --keep-engine         with --uninstall: leave the engine and the models in place
  -h, --help            this text

Settings given once are remembered: a later run needs only what changes.
EOF
}

# ---------------------------------------------------------------------------
# Output. Findings use the agent doctor's words: "ok:", "problem:" with an
# indented "hint:", and "note:".

say() { printf '%s\n' "$*"; }
step() { printf '==> %s\n' "$*"; }
ok() { printf 'ok: %s\n' "$*"; }
note() { printf '  note: %s\n' "$*"; }
problems=0
problem() {
	problems=$((problems + 1))
	printf 'problem: %s\n' "$1"
	if [ $# -gt 1 ] && [ -n "$2" ]; then
		printf '  hint: %s\n' "$2"
	fi
}
# fail reports a problem and stops with exit code 1.
fail() {
	problem "$@"
	exit 1
}
usage_error() {
	printf 'install-node.sh: %s\n(install-node.sh --help lists the options)\n' "$*" >&2
	exit 2
}
indent() { sed 's/^/    /'; }

have() { command -v "$1" >/dev/null 2>&1; }

# ---------------------------------------------------------------------------
# Arguments.

action=install
o_gateway='' s_gateway=0
o_node_id='' s_node_id=0
o_key='' s_key=0
o_key_file=''
o_tls='' s_tls=0
o_models='' s_models=0
o_engine='' s_engine=0
o_engine_url='' s_engine_url=0
o_version=''
o_agent_url=''
o_agent_bin=''
o_listen='' s_listen=0
o_advertise='' s_advertise=0
o_expose='' s_expose=0
o_slots='' s_slots=0
o_gateway_http='' s_gateway_http=0
o_wait=60
keep_engine=0

parse_args() {
	while [ $# -gt 0 ]; do
		opt=$1
		inline=0
		val=''
		case $opt in
		--*=*)
			val=${opt#*=}
			opt=${opt%%=*}
			inline=1
			;;
		esac
		case $opt in
		--gateway | --node-id | --key | --key-file | --model | --engine | --engine-url | --version | \
			--agent-url | --agent-bin | --listen | --advertise-url | --expose | --slots | --wait | --gateway-http)
			if [ $inline = 0 ]; then
				[ $# -ge 2 ] || usage_error "$opt needs a value"
				val=$2
				shift
			fi
			;;
		*)
			[ $inline = 0 ] || usage_error "$opt takes no value"
			;;
		esac
		case $opt in
		--gateway) o_gateway=$val s_gateway=1 ;;
		--node-id) o_node_id=$val s_node_id=1 ;;
		--key) o_key=$val s_key=1 ;;
		--key-file) o_key_file=$val ;;
		--tls) o_tls=true s_tls=1 ;;
		--no-tls) o_tls=false s_tls=1 ;;
		--model)
			o_models=${o_models:+$o_models,}$val
			s_models=1
			;;
		--engine) o_engine=$val s_engine=1 ;;
		--engine-url) o_engine_url=${val%/} s_engine_url=1 ;;
		--version) o_version=$val ;;
		--agent-url) o_agent_url=${val%/} ;;
		--agent-bin) o_agent_bin=$val ;;
		--listen) o_listen=$val s_listen=1 ;;
		--advertise-url) o_advertise=${val%/} s_advertise=1 ;;
		--expose) o_expose=$val s_expose=1 ;;
		--slots) o_slots=$val s_slots=1 ;;
		--gateway-http) o_gateway_http=${val%/} s_gateway_http=1 ;;
		--wait) o_wait=$val ;;
		--keep-engine) keep_engine=1 ;;
		--doctor) action=doctor ;;
		--uninstall) action=uninstall ;;
		-h | --help) action=help ;;
		*) usage_error "unknown option $opt" ;;
		esac
		shift
	done
}

# safe says whether a value can be written into the agent's settings file as
# is: it is read both by systemd and by sh, so quotes, dollars, backslashes,
# spaces and control characters are kept out.
safe() {
	case $1 in
	'' | *[!A-Za-z0-9._:/@%+=,~\[\]-]*) return 1 ;;
	esac
}

# ---------------------------------------------------------------------------
# Where things go.

platform() {
	kernel=$(uname -s)
	machine=$(uname -m)
	case $kernel in
	Linux) os=linux ;;
	Darwin) os=darwin ;;
	*) fail "this script installs nodes on Linux and macOS; this machine runs $kernel" ;;
	esac
	case $machine in
	x86_64 | amd64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) fail "there is no switchyard-agent build for $machine; builds exist for Linux on x86_64 and arm64, and for Apple silicon Macs" ;;
	esac
	rosetta_shell=0
	if [ "$os" = darwin ] && [ "$arch" = amd64 ]; then
		if [ "$(sysctl -n hw.optional.arm64 2>/dev/null || true)" = 1 ]; then
			# An Apple silicon Mac whose shell runs under Rosetta: the
			# agent is installed for the machine, not for the shell.
			arch=arm64
			rosetta_shell=1
		else
			fail "there is no switchyard-agent build for Intel Macs; it runs on Apple silicon"
		fi
	fi
	uid=$(id -u)
	user_name=$(id -un 2>/dev/null || echo "${USER:-}")
	if [ "$os" = darwin ]; then
		mode=launchd
	elif [ "$uid" = 0 ]; then
		mode=system
	else
		mode=user
	fi
	R=${SWITCHYARD_INSTALL_ROOT:-}
	set_paths
}

set_paths() {
	case $mode in
	system)
		bin_dir=$R/usr/local/bin
		conf_dir=$R/etc/switchyard-agent
		data_dir=$R/var/lib/switchyard-agent
		unit_dir=$R/etc/systemd/system
		;;
	user)
		bin_dir=$HOME/.local/bin
		conf_dir=${XDG_CONFIG_HOME:-$HOME/.config}/switchyard-agent
		data_dir=${XDG_DATA_HOME:-$HOME/.local/share}/switchyard-agent
		unit_dir=${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user
		;;
	launchd)
		bin_dir="$HOME/Library/Application Support/switchyard-agent"
		conf_dir=$bin_dir
		data_dir=$bin_dir
		agents_dir=$HOME/Library/LaunchAgents
		log_dir=$HOME/Library/Logs
		agent_log_file=$log_dir/switchyard-agent.log
		ollama_log_file=$log_dir/switchyard-ollama.log
		;;
	esac
	agent_bin=$bin_dir/switchyard-agent
	previous_bin=$data_dir/switchyard-agent.previous
	env_file=$conf_dir/agent.env
	key_file=$conf_dir/node-key
	state_file=$data_dir/install-state
}

# A user that is not root finds a system-wide install when it has none of
# its own: --doctor and --uninstall then say to use sudo.
system_install_exists() {
	[ -f "${SWITCHYARD_INSTALL_ROOT:-}/etc/switchyard-agent/agent.env" ]
}

# ---------------------------------------------------------------------------
# Small tools.

sha256() {
	if have sha256sum; then
		sha256sum "$1" | awk '{print $1}'
	elif have shasum; then
		shasum -a 256 "$1" | awk '{print $1}'
	else
		openssl dgst -sha256 -r "$1" | awk '{print $1}'
	fi
}

# put FILE MODE writes standard input to FILE when that changes it. It
# returns 0 when the file changed and 1 when it already held that content.
put() {
	put_tmp=$(mktemp "$(dirname "$1")/.install-node.XXXXXX")
	cat >"$put_tmp"
	if [ -f "$1" ] && cmp -s "$put_tmp" "$1"; then
		rm -f "$put_tmp"
		return 1
	fi
	chmod "$2" "$put_tmp"
	mv -f "$put_tmp" "$1"
}

xml() { printf '%s' "$1" | sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g'; }

# setting NAME prints NAME's value from the agent's settings file.
setting() {
	[ -f "$env_file" ] || return 0
	sed -n "s/^$1=\"\\(.*\\)\"\$/\\1/p" "$env_file" | tail -n 1
}

state() {
	[ -f "$state_file" ] || return 0
	sed -n "s/^$1=//p" "$state_file" | tail -n 1
}

set_state() {
	mkdir -p "$data_dir"
	touch "$state_file"
	grep -v "^$1=" "$state_file" >"$state_file.tmp" || true
	printf '%s=%s\n' "$1" "$2" >>"$state_file.tmp"
	mv -f "$state_file.tmp" "$state_file"
}

agent_version() {
	"$1" version 2>/dev/null </dev/null | awk 'NR == 1 {print $2}'
}

# seconds says a duration in words, rounded: "10 minutes", "3 hours".
seconds() {
	if [ "$1" -ge 7200 ]; then
		echo "$((($1 + 1800) / 3600)) hours"
	elif [ "$1" -ge 120 ]; then
		echo "$((($1 + 30) / 60)) minutes"
	else
		echo "$1 seconds"
	fi
}

# epoch_of_http_date turns an HTTP Date header ("Tue, 15 Nov 1994 08:12:31
# GMT") into seconds since 1970, with no help from date(1), whose options
# differ between Linux and macOS.
epoch_of_http_date() {
	printf '%s\n' "$1" | awk '{
		m = index("JanFebMarAprMayJunJulAugSepOctNovDec", $3)
		if (m == 0 || split($5, t, ":") != 3) exit 1
		m = (m + 2) / 3; y = $4 + 0; d = $2 + 0
		if (m <= 2) { y -= 1; m += 12 }
		days = 365 * y + int(y / 4) - int(y / 100) + int(y / 400) + int((153 * (m - 3) + 2) / 5) + d - 1 - 719468
		print days * 86400 + t[1] * 3600 + t[2] * 60 + t[3]
	}'
}

# ---------------------------------------------------------------------------
# Services: systemd units on Linux, launchd jobs on macOS.

svc() {
	if [ "$mode" = user ]; then
		systemctl --user "$@"
	else
		systemctl "$@"
	fi
}

# unit_state NAME prints running, failing (crashed, or restarting after a
# crash), stopped or missing.
unit_state() {
	if [ "$mode" = launchd ]; then
		if ! launchd_out=$(launchctl print "gui/$uid/$1" 2>/dev/null); then
			echo missing
		elif printf '%s\n' "$launchd_out" | grep -q 'state = running'; then
			echo running
		elif printf '%s\n' "$launchd_out" | grep -q 'last exit code = 0'; then
			echo stopped
		elif printf '%s\n' "$launchd_out" | grep -q 'last exit code'; then
			echo failing
		else
			echo stopped
		fi
		return 0
	fi
	systemd_state=$(svc is-active "$1" 2>/dev/null || true)
	case $systemd_state in
	active | reloading) echo running ;;
	failed | activating) echo failing ;;
	inactive | deactivating) echo stopped ;;
	*) echo missing ;;
	esac
}

unit_file_of() {
	if [ "$mode" = launchd ]; then
		echo "$agents_dir/$1.plist"
	else
		echo "$unit_dir/$1"
	fi
}

# restart_unit NAME (re)starts a unit whose files are in place; a launchd job
# whose plist changed is loaded afresh.
restart_unit() {
	if [ "$mode" = launchd ]; then
		if launchctl print "gui/$uid/$1" >/dev/null 2>&1; then
			launchctl kickstart -k "gui/$uid/$1"
		else
			launchctl bootstrap "gui/$uid" "$(unit_file_of "$1")"
		fi
	else
		svc restart "$1"
	fi
}

reload_job() {
	launchctl bootout "gui/$uid/$1" 2>/dev/null || true
	launchctl bootstrap "gui/$uid" "$(unit_file_of "$1")"
}

# The agent's log since its last start: journald on Linux, the job's log file
# on macOS (read from where it ended before the start).
log_since=0
log_offset=0
mark_log() {
	log_since=$(date +%s)
	log_offset=0
	if [ "$mode" = launchd ] && [ -f "$agent_log_file" ]; then
		log_offset=$(wc -c <"$agent_log_file" | tr -d ' ')
	fi
}

agent_log() {
	case $mode in
	system) journalctl --no-pager -o cat -u "$AGENT_UNIT" --since "@$log_since" 2>/dev/null || true ;;
	user) journalctl --user --no-pager -o cat --user-unit "$AGENT_UNIT" --since "@$log_since" 2>/dev/null || true ;;
	launchd) tail -c "+$((log_offset + 1))" "$agent_log_file" 2>/dev/null || true ;;
	esac
}

# ---------------------------------------------------------------------------
# The engine.

engine_default_url() {
	case $1 in
	ollama) echo "$OLLAMA_URL" ;;
	vllm | sglang) echo http://127.0.0.1:8000 ;;
	tgi | llamacpp) echo http://127.0.0.1:8080 ;;
	esac
}

engine_up() {
	case $engine in
	ollama) engine_path=/api/version ;;
	openai) engine_path=/v1/models ;;
	*) engine_path=/health ;;
	esac
	curl -fsS --max-time 5 -o /dev/null "$engine_url$engine_path" 2>/dev/null </dev/null
}

wait_engine() {
	wait_left=$1
	while ! engine_up; do
		[ "$wait_left" -gt 0 ] || return 1
		sleep 1
		wait_left=$((wait_left - 1))
	done
}

# find_ollama sets ollama_bin: the ollama command, or the one inside the
# macOS app when the app never put it on PATH.
find_ollama() {
	ollama_bin=$(command -v ollama 2>/dev/null || true)
	if [ -z "$ollama_bin" ] && [ "$os" = darwin ]; then
		for candidate in "$HOME/Applications/Ollama.app/Contents/Resources/ollama" "$R/Applications/Ollama.app/Contents/Resources/ollama"; do
			if [ -x "$candidate" ]; then
				ollama_bin=$candidate
				break
			fi
		done
	fi
}

ollama_cli() { OLLAMA_HOST=$engine_url "$ollama_bin" "$@" </dev/null; }

install_ollama() {
	ollama_work=$(mktemp -d)
	if [ "$os" = linux ]; then
		step "installing Ollama with its official installer (it asks for sudo when not run as root)"
		curl -fsSL "$OLLAMA_LINUX_INSTALLER" -o "$ollama_work/install.sh" </dev/null ||
			fail "could not download Ollama's installer from $OLLAMA_LINUX_INSTALLER" "check this machine's internet access, or install Ollama yourself and run this again"
		if ! sh "$ollama_work/install.sh" </dev/null; then
			rm -rf "$ollama_work"
			fail "Ollama's installer failed (see its messages above)" "it needs root or sudo; or install Ollama yourself, or run another engine and pass --engine and --engine-url"
		fi
		set_state engine_installed ollama-linux
	else
		step "installing Ollama into ~/Applications"
		curl -fsSL "$OLLAMA_MAC_APP" -o "$ollama_work/Ollama-darwin.zip" </dev/null ||
			fail "could not download Ollama from $OLLAMA_MAC_APP" "check this machine's internet access, or install Ollama yourself and run this again"
		mkdir -p "$HOME/Applications"
		unzip -q -o "$ollama_work/Ollama-darwin.zip" -d "$HOME/Applications" </dev/null ||
			fail "could not unpack Ollama into ~/Applications"
		set_state engine_installed ollama-app
	fi
	rm -rf "$ollama_work"
	find_ollama
	[ -n "$ollama_bin" ] || fail "Ollama's installer finished, but no ollama command can be found"
	ok "Ollama installed: $ollama_bin"
}

# start_ollama runs ollama serve as a service when Ollama is installed but
# nothing answers: its own systemd unit when it has one, else ours.
start_ollama() {
	if [ "$mode" = system ] && svc cat ollama.service >/dev/null 2>&1; then
		step "starting Ollama's service"
		svc enable --now ollama.service
		return 0
	fi
	step "starting Ollama as a service"
	case $mode in
	launchd)
		mkdir -p "$agents_dir" "$log_dir"
		ollama_plist || true
		reload_job "$OLLAMA_LABEL"
		;;
	*)
		mkdir -p "$unit_dir"
		if [ "$mode" = system ]; then
			ensure_service_user
			mkdir -p "$data_dir/ollama"
			chown "$SERVICE_USER:$SERVICE_USER" "$data_dir/ollama"
		fi
		ollama_unit | put "$unit_dir/$OLLAMA_UNIT" 0644 || true
		svc daemon-reload
		svc enable --now "$OLLAMA_UNIT"
		;;
	esac
	set_state engine_service ours
}

ollama_unit() {
	cat <<EOF
# Written by install-node.sh: Ollama for the Switchyard agent.
[Unit]
Description=Ollama, serving models to the Switchyard node agent
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=$ollama_bin serve
Restart=on-failure
RestartSec=5
EOF
	if [ "$mode" = system ]; then
		cat <<EOF
User=$SERVICE_USER
Group=$SERVICE_USER
Environment=HOME=$data_dir/ollama
EOF
	fi
	printf '\n[Install]\nWantedBy=%s\n' "$(wanted_by)"
}

ollama_plist() {
	put "$agents_dir/$OLLAMA_LABEL.plist" 0644 <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by install-node.sh: Ollama for the Switchyard agent. -->
<plist version="1.0">
<dict>
	<key>Label</key><string>$OLLAMA_LABEL</string>
	<key>ProgramArguments</key>
	<array>
		<string>$(xml "$ollama_bin")</string>
		<string>serve</string>
	</array>
	<key>RunAtLoad</key><true/>
	<key>KeepAlive</key><true/>
	<key>StandardOutPath</key><string>$(xml "$ollama_log_file")</string>
	<key>StandardErrorPath</key><string>$(xml "$ollama_log_file")</string>
</dict>
</plist>
EOF
}

wanted_by() {
	if [ "$mode" = system ]; then echo multi-user.target; else echo default.target; fi
}

ensure_engine() {
	if [ "$engine" != ollama ]; then
		engine_up || fail "the engine ($engine) is not responding at $engine_url" \
			"start it first (this script installs only Ollama), or point --engine-url at where it listens"
		ok "the engine ($engine) answers at $engine_url"
		return 0
	fi
	find_ollama
	if engine_up; then
		ok "Ollama answers at $engine_url"
		return 0
	fi
	if [ -z "$ollama_bin" ]; then
		[ "$engine_url" = "$OLLAMA_URL" ] ||
			fail "nothing answers at $engine_url, and Ollama is not installed" \
				"this script installs Ollama at its usual address; drop --engine-url, or start Ollama there yourself"
		install_ollama
		# Ollama's Linux installer starts its own service.
		if [ "$os" = linux ]; then wait_engine 15 || true; fi
	fi
	if ! engine_up; then
		[ "$engine_url" = "$OLLAMA_URL" ] ||
			fail "Ollama is installed but nothing answers at $engine_url" "start it there (OLLAMA_HOST=… ollama serve), or drop --engine-url"
		start_ollama
		wait_engine 30 || fail "Ollama does not answer at $engine_url after being started" "$(ollama_log_hint)"
	fi
	ok "Ollama answers at $engine_url"
}

ollama_log_hint() {
	case $mode in
	launchd) echo "its log: $ollama_log_file" ;;
	system) echo "its log: journalctl -u ollama -u $OLLAMA_UNIT" ;;
	user) echo "its log: journalctl --user -u $OLLAMA_UNIT" ;;
	esac
}

ollama_has() {
	if [ -n "$ollama_bin" ]; then
		ollama_cli show "$1" >/dev/null 2>&1
	else
		curl -fsS --max-time 10 -o /dev/null "$engine_url/api/show" -d "{\"model\":\"$1\"}" 2>/dev/null </dev/null
	fi
}

ensure_models() {
	[ "$engine" = ollama ] || return 0
	[ -n "$models" ] || return 0
	pulled=$(state models_pulled)
	old_ifs=$IFS
	IFS=,
	for model in $models; do
		IFS=$old_ifs
		if ollama_has "$model"; then
			ok "Ollama has $model"
			continue
		fi
		step "pulling $model (a large model takes a while)"
		if [ -n "$ollama_bin" ]; then
			ollama_cli pull "$model" || fail "ollama pull $model failed" "check the model's name and the free disk space"
		else
			curl -fsS -o /dev/null "$engine_url/api/pull" -d "{\"model\":\"$model\",\"stream\":false}" </dev/null ||
				fail "Ollama at $engine_url could not pull $model" "check the model's name and the free disk space"
		fi
		ok "pulled $model"
		case ",$pulled," in
		*",$model,"*) ;;
		*) pulled=${pulled:+$pulled,}$model ;;
		esac
	done
	IFS=$old_ifs
	set_state models_pulled "$pulled"
}

# ---------------------------------------------------------------------------
# The agent binary.

agent_asset() { echo "switchyard-agent-$os-$arch"; }

# fetch_agent sets new_agent to a verified binary to install, or to "" when
# the installed one is already the one wanted.
fetch_agent() {
	new_agent=''
	agent_work=$(mktemp -d)
	trap 'rm -rf "$agent_work"' EXIT
	asset=$(agent_asset)
	agent_src=$(state agent_source)
	if [ -n "$o_agent_bin" ]; then
		agent_src='file'
	elif [ -n "$o_agent_url" ]; then
		agent_src=url:$o_agent_url
	elif [ -n "$o_version" ]; then
		agent_src=url:$RELEASES/download/$o_version
	elif [ -z "$agent_src" ]; then
		agent_src=url:$RELEASES/latest/download
	fi

	if [ "$agent_src" = file ] && [ -z "$o_agent_bin" ]; then
		# Installed from a local file before, and no new one given.
		[ -x "$agent_bin" ] || fail "the agent was installed from a file (--agent-bin) that this run does not give" "pass --agent-bin PATH, or --version to download a release"
		return 0
	fi

	expected=''
	if [ "$agent_src" = file ]; then
		[ -f "$o_agent_bin" ] || usage_error "--agent-bin: no file at $o_agent_bin"
		candidate=$agent_work/$asset
		cp "$o_agent_bin" "$candidate"
		sums=$(dirname "$o_agent_bin")/checksums.txt
		if [ -f "$sums" ]; then
			expected=$(awk -v f="$(basename "$o_agent_bin")" -v a="$asset" '$2 == f || $2 == "*" f || $2 == a || $2 == "*" a {print $1; exit}' "$sums")
			[ -n "$expected" ] || fail "$sums does not list $(basename "$o_agent_bin")" "use the checksums.txt published with that binary"
		fi
	else
		base=${agent_src#url:}
		curl -fsSL "$base/checksums.txt" -o "$agent_work/checksums.txt" </dev/null ||
			fail "could not download $base/checksums.txt" "check --version or --agent-url, and this machine's internet access"
		expected=$(awk -v a="$asset" '$2 == a || $2 == "*" a {print $1; exit}' "$agent_work/checksums.txt")
		[ -n "$expected" ] || fail "$base/checksums.txt lists no $asset" "that release has no agent for $os/$arch"
		if [ -x "$agent_bin" ] && [ "$(sha256 "$agent_bin")" = "$expected" ]; then
			set_state agent_source "$agent_src"
			return 0
		fi
		curl -fsSL "$base/$asset" -o "$agent_work/$asset" </dev/null || fail "could not download $base/$asset"
		candidate=$agent_work/$asset
	fi

	if [ -n "$expected" ]; then
		actual=$(sha256 "$candidate")
		[ "$actual" = "$expected" ] ||
			fail "the agent's SHA-256 is $actual, but the published checksum is $expected: it was not installed" \
				"the download was damaged or tampered with; nothing was changed"
		verified="SHA-256 matches checksums.txt"
	else
		verified="a local file with no checksums.txt beside it: not verified"
	fi
	if [ -x "$agent_bin" ] && cmp -s "$candidate" "$agent_bin"; then
		set_state agent_source "$agent_src"
		return 0
	fi
	chmod 0755 "$candidate"
	new_version=$(agent_version "$candidate")
	[ -n "$new_version" ] || fail "the new agent does not run on this machine (\"$candidate version\" failed)" "is it built for $os/$arch?"
	new_agent=$candidate
	agent_source_wanted=$agent_src
}

install_agent_binary() {
	mkdir -p "$bin_dir" "$data_dir"
	old_version=''
	if [ -x "$agent_bin" ]; then
		old_version=$(agent_version "$agent_bin")
		cp -p "$agent_bin" "$previous_bin"
	fi
	cp "$new_agent" "$agent_bin.new"
	chmod 0755 "$agent_bin.new"
	mv -f "$agent_bin.new" "$agent_bin"
	set_state agent_source "$agent_source_wanted"
	if [ -n "$old_version" ]; then
		ok "agent $new_version installed in place of $old_version ($verified)"
	else
		ok "agent $new_version installed: $agent_bin ($verified)"
	fi
}

# ---------------------------------------------------------------------------
# Settings, key and service files.

ensure_service_user() {
	[ "$mode" = system ] || return 0
	id "$SERVICE_USER" >/dev/null 2>&1 && return 0
	nologin=/usr/sbin/nologin
	[ -x "$nologin" ] || nologin=/sbin/nologin
	useradd --system --user-group --no-create-home --home-dir "${data_dir#"$R"}" --shell "$nologin" "$SERVICE_USER" ||
		fail "could not create the system user $SERVICE_USER the agent runs as"
	set_state created_user "$SERVICE_USER"
	ok "created the system user $SERVICE_USER for the agent"
}

agent_env() {
	echo '# switchyard-agent settings, written by install-node.sh: run it again to change them.'
	echo "SWITCHYARD_GATEWAY=\"$gateway\""
	echo "SWITCHYARD_GATEWAY_TLS=\"$tls\""
	echo "SWITCHYARD_NODE_ID=\"$node_id\""
	echo "SWITCHYARD_NODE_KEY_FILE=\"$key_file\""
	echo "SWITCHYARD_ENGINE=\"$engine\""
	echo "SWITCHYARD_ENGINE_URL=\"$engine_url\""
	[ -z "$models" ] || echo "SWITCHYARD_MODELS=\"$models\""
	[ -z "$listen" ] || echo "SWITCHYARD_FRONT_ADDR=\"$listen\""
	[ -z "$advertise" ] || echo "SWITCHYARD_ADVERTISE_URL=\"$advertise\""
	[ -z "$expose" ] || echo "SWITCHYARD_EXPOSE=\"$expose\""
	[ -z "$slots" ] || echo "SWITCHYARD_SLOTS=\"$slots\""
}

agent_unit() {
	if [ "$inhibit" ]; then
		wants="network-online.target $AWAKE_UNIT"
	else
		wants=network-online.target
	fi
	after=network-online.target
	if [ "$engine" = ollama ]; then after="$after ollama.service $OLLAMA_UNIT"; fi
	cat <<EOF
# Written by install-node.sh: run it again to change this node.
[Unit]
Description=Switchyard node agent: the engine front and heartbeats to the gateway
Documentation=https://github.com/switchyard-ai/switchyard
After=$after
Wants=$wants

[Service]
Type=simple
EnvironmentFile=$env_file
ExecStart=$agent_bin run
Restart=on-failure
RestartSec=5
# The agent drains on SIGTERM for up to its shutdown timeout (30 s).
TimeoutStopSec=45
EOF
	if [ "$mode" = system ]; then
		cat <<EOF
User=$SERVICE_USER
Group=$SERVICE_USER
NoNewPrivileges=yes
ProtectSystem=full
ProtectHome=read-only
PrivateTmp=yes
EOF
	fi
	printf '\n[Install]\nWantedBy=%s\n' "$(wanted_by)"
}

# The machine must not suspend while it serves: a block inhibitor held by a
# unit of its own that lives and dies with the agent's. Kept apart from the
# agent so that a refused inhibitor never stops the agent.
awake_unit() {
	cat <<EOF
# Written by install-node.sh: keeps this machine awake while the agent runs.
[Unit]
Description=Keep this machine awake while the Switchyard node agent runs
BindsTo=$AGENT_UNIT
After=$AGENT_UNIT

[Service]
ExecStart=$inhibit --what=sleep:idle --who=switchyard-agent --why="serving models to the Switchyard gateway" --mode=block $(command -v sleep) infinity
EOF
}

# On macOS caffeinate holds the machine awake while the agent's process
# lives (-w): the shell starts it on its own PID, then becomes the agent.
agent_plist() {
	caffeinate=$(command -v caffeinate 2>/dev/null || echo /usr/bin/caffeinate)
	cat <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by install-node.sh: run it again to change this node. -->
<plist version="1.0">
<dict>
	<key>Label</key><string>$AGENT_LABEL</string>
	<key>ProgramArguments</key>
	<array>
		<string>/bin/sh</string>
		<string>-c</string>
		<string>set -a; . "\$1"; set +a; $(xml "$caffeinate") -i -s -w \$\$ &amp; exec "\$0" run</string>
		<string>$(xml "$agent_bin")</string>
		<string>$(xml "$env_file")</string>
	</array>
	<key>RunAtLoad</key><true/>
	<key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
	<key>ThrottleInterval</key><integer>5</integer>
	<key>ExitTimeOut</key><integer>45</integer>
	<key>StandardOutPath</key><string>$(xml "$agent_log_file")</string>
	<key>StandardErrorPath</key><string>$(xml "$agent_log_file")</string>
</dict>
</plist>
EOF
}

write_config() {
	config_changed=0
	mkdir -p "$conf_dir"
	if [ "$mode" = system ]; then chmod 0755 "$conf_dir"; else chmod 0700 "$conf_dir"; fi
	old_umask=$(umask)
	umask 077
	if printf '%s\n' "$key" | put "$key_file" 0600; then
		config_changed=1
		ok "node key written to $key_file (readable by the agent's user only)"
	fi
	umask "$old_umask"
	if [ "$mode" = system ]; then chown "$SERVICE_USER:$SERVICE_USER" "$key_file"; fi
	if agent_env | put "$env_file" 0644; then
		config_changed=1
		ok "settings written to $env_file"
	fi
}

write_services() {
	units_changed=0
	if [ "$mode" = launchd ]; then
		mkdir -p "$agents_dir" "$log_dir"
		if agent_plist | put "$(unit_file_of "$AGENT_LABEL")" 0644; then units_changed=1; fi
		return 0
	fi
	mkdir -p "$unit_dir"
	inhibit=$(command -v systemd-inhibit 2>/dev/null || true)
	if agent_unit | put "$unit_dir/$AGENT_UNIT" 0644; then units_changed=1; fi
	if [ "$inhibit" ]; then
		if awake_unit | put "$unit_dir/$AWAKE_UNIT" 0644; then units_changed=1; fi
	fi
	if [ "$units_changed" = 1 ]; then svc daemon-reload; fi
	if ! svc is-enabled "$AGENT_UNIT" >/dev/null 2>&1; then svc enable "$AGENT_UNIT"; fi
	if [ "$mode" = user ] && have loginctl &&
		[ "$(loginctl show-user "$user_name" -p Linger --value 2>/dev/null || true)" != yes ]; then
		# A user service runs from boot, not only while its user is
		# logged in, once the user lingers.
		loginctl enable-linger "$user_name" 2>/dev/null ||
			note "a user service stops when you log out; to keep it running, ask an administrator for: loginctl enable-linger $user_name"
	fi
}

start_agent() {
	mark_log
	if [ "$mode" = launchd ] && [ "$units_changed" = 1 ]; then
		reload_job "$AGENT_LABEL"
	else
		restart_unit "$(agent_unit_name)"
	fi
}

agent_unit_name() {
	if [ "$mode" = launchd ]; then echo "$AGENT_LABEL"; else echo "$AGENT_UNIT"; fi
}

# wait_listed watches the agent's first moments. It returns 0 once the
# gateway accepted a heartbeat (it lists the node then), 2 when the agent
# did not stay up, 3 when the gateway refused the key, 1 when the time ran
# out.
wait_listed() {
	waited=0
	down=0
	while :; do
		log=$(agent_log)
		case $log in
		*"$LOG_ACCEPTED"*) return 0 ;;
		*"$LOG_REFUSED"*) return 3 ;;
		esac
		# A crash shows at once; a job not (yet) running must stay so
		# for two looks, since a service manager may take a moment to
		# spawn it.
		case $(unit_state "$(agent_unit_name)") in
		failing) return 2 ;;
		stopped | missing)
			down=$((down + 1))
			[ "$down" -lt 2 ] || return 2
			;;
		*) down=0 ;;
		esac
		[ "$waited" -lt "$o_wait" ] || [ "$down" = 1 ] || return 1
		sleep 2
		waited=$((waited + 2))
	done
}

# run_agent_doctor runs the installed agent's doctor with the installed
# settings, and none of the caller's.
run_agent_doctor() {
	(
		for v in SWITCHYARD_GATEWAY SWITCHYARD_GATEWAY_TLS SWITCHYARD_NODE_ID SWITCHYARD_NODE_KEY \
			SWITCHYARD_NODE_KEY_FILE SWITCHYARD_ENGINE SWITCHYARD_ENGINE_URL SWITCHYARD_ENGINE_API_KEY \
			SWITCHYARD_FRONT_ADDR SWITCHYARD_ADVERTISE_URL SWITCHYARD_SLOTS SWITCHYARD_MODELS SWITCHYARD_EXPOSE; do
			unset "$v"
		done
		set -a
		# shellcheck disable=SC1090 # the settings this script wrote
		. "$env_file"
		set +a
		"$agent_bin" doctor </dev/null 2>&1
	)
}

show_log() {
	log=$(agent_log)
	if [ -n "$log" ]; then
		say "  the agent's log since it started:"
		printf '%s\n' "$log" | tail -n 15 | indent
	fi
}

explain_with_doctor() {
	say "  the agent's doctor says:"
	run_agent_doctor | grep -Ev '^(all checks passed|[0-9]+ problem\(s\) found)$' | indent || true
}

service_log_hint() {
	case $mode in
	system) echo "journalctl -u $AGENT_UNIT" ;;
	user) echo "journalctl --user -u $AGENT_UNIT" ;;
	launchd) echo "$agent_log_file" ;;
	esac
}

rollback() {
	say "problem: the new agent ($new_version) did not start:"
	show_log
	cp -p "$previous_bin" "$agent_bin.new"
	mv -f "$agent_bin.new" "$agent_bin"
	step "putting back the previous agent ($old_version)"
	mark_log
	restart_unit "$(agent_unit_name)"
	if wait_listed; then
		say "  hint: the previous agent ($old_version) runs again and the gateway lists the node; report the failed upgrade with the log above"
	else
		say "  hint: the previous agent ($old_version) is back in place; see --doctor and its log: $(service_log_hint)"
	fi
	exit 1
}

# ---------------------------------------------------------------------------
# install

resolve_settings() {
	# Each setting: this run's flag, else the installed value, else the
	# default.
	pick() { if [ "$1" = 1 ]; then printf '%s' "$2"; else setting "$3"; fi; }
	gateway=$(pick "$s_gateway" "$o_gateway" SWITCHYARD_GATEWAY)
	node_id=$(pick "$s_node_id" "$o_node_id" SWITCHYARD_NODE_ID)
	tls=$(pick "$s_tls" "$o_tls" SWITCHYARD_GATEWAY_TLS)
	tls=${tls:-false}
	models=$(pick "$s_models" "$o_models" SWITCHYARD_MODELS)
	engine=$(pick "$s_engine" "$o_engine" SWITCHYARD_ENGINE)
	engine=${engine:-ollama}
	engine_url=$(pick "$s_engine_url" "$o_engine_url" SWITCHYARD_ENGINE_URL)
	if [ "$s_engine" = 1 ] && [ "$s_engine_url" = 0 ] && [ "$engine" != "$(setting SWITCHYARD_ENGINE)" ]; then
		engine_url=''
	fi
	engine_url=${engine_url:-$(engine_default_url "$engine")}
	listen=$(pick "$s_listen" "$o_listen" SWITCHYARD_FRONT_ADDR)
	advertise=$(pick "$s_advertise" "$o_advertise" SWITCHYARD_ADVERTISE_URL)
	expose=$(pick "$s_expose" "$o_expose" SWITCHYARD_EXPOSE)
	slots=$(pick "$s_slots" "$o_slots" SWITCHYARD_SLOTS)
	gateway_http=$o_gateway_http
	if [ "$s_gateway_http" = 0 ]; then gateway_http=$(state gateway_http); fi

	key=''
	if [ "$s_key" = 1 ]; then
		key=$o_key
	elif [ -n "$o_key_file" ]; then
		[ -r "$o_key_file" ] || usage_error "--key-file: cannot read $o_key_file"
		key=$(tr -d ' \r\n\t' <"$o_key_file")
	elif [ -n "${SWITCHYARD_NODE_KEY:-}" ]; then
		key=$SWITCHYARD_NODE_KEY
	elif [ -r "$key_file" ]; then
		key=$(tr -d ' \r\n\t' <"$key_file")
	fi

	missing=''
	[ -n "$gateway" ] || missing="$missing --gateway"
	[ -n "$node_id" ] || missing="$missing --node-id"
	[ -n "$key" ] || missing="$missing --key"
	if [ "$engine" = ollama ] && [ -z "$models" ]; then missing="$missing --model"; fi
	[ -z "$missing" ] || usage_error "missing$missing (the gateway's address, this node's id, the key minted for it, and the model to serve)"

	case $gateway in
	*://*) usage_error "--gateway wants host:port without a scheme, such as gw.example.com:9090 (add --tls for TLS), got $gateway" ;;
	*:[0-9]*) ;;
	*) usage_error "--gateway wants host:port, such as gw.example.com:9090, got $gateway" ;;
	esac
	safe "$gateway" || usage_error "--gateway: $gateway has characters a host:port has not"
	safe "$node_id" || usage_error "--node-id: use letters, digits and . _ : - only, got \"$node_id\""
	case $key in
	syn_?*) safe "$key" || usage_error "--key does not look like a node key (one line, no spaces)" ;;
	*) usage_error "--key is not a node key: node keys begin with syn_ (an administrator mints one with MintNodeKey)" ;;
	esac
	case $engine in
	ollama | vllm | sglang | tgi | llamacpp) ;;
	openai) [ -n "$engine_url" ] || usage_error "--engine openai needs --engine-url" ;;
	*) usage_error "--engine must be ollama, vllm, sglang, tgi, llamacpp or openai, got $engine" ;;
	esac
	for pair in "engine-url:$engine_url" "model:$models" "listen:$listen" "advertise-url:$advertise" "gateway-http:$gateway_http"; do
		value=${pair#*:}
		[ -z "$value" ] || safe "$value" || usage_error "--${pair%%:*}: \"$value\" has characters this script does not write into settings (spaces, quotes, \$ or \\)"
	done
	case $engine_url in http://* | https://*) ;; *) usage_error "--engine-url wants an http:// or https:// URL, got $engine_url" ;; esac
	case $expose in '' | cloudflared) ;; *) usage_error "--expose: the only choice is cloudflared, got $expose" ;; esac
	case $slots in '' | *[!0-9]*) [ -z "$slots" ] || usage_error "--slots wants a whole number, got $slots" ;; esac
	case $o_wait in '' | *[!0-9]*) usage_error "--wait wants a number of seconds, got $o_wait" ;; esac
	case $tls in true | false) ;; *) tls=false ;; esac
}

install() {
	platform
	if [ "$mode" = user ] && [ -z "$(state agent_source)" ] && system_install_exists; then
		fail "this machine has a system-wide install, which only root can change" "run this with sudo"
	fi
	resolve_settings
	case $mode in
	system) where="a systemd system service" ;;
	user) where="a systemd user service (not root)" ;;
	launchd) where="launchd LaunchAgents for $user_name" ;;
	esac
	say "Switchyard node $node_id → $gateway: $os/$arch, $where"
	if [ "$rosetta_shell" = 1 ]; then
		note "this shell runs under Rosetta; the agent is installed for Apple silicon all the same"
	fi
	if [ "$mode" = launchd ] && [ ! -f "$env_file" ]; then
		note "LaunchAgents run while $user_name is logged in: on a Mac that restarts unattended, turn on automatic login"
	fi
	if [ "$os" = linux ] && ! have systemctl; then
		fail "this script runs the agent as a systemd service, and this machine has no systemctl" \
			"run switchyard-agent run under the service manager you use instead"
	fi
	if [ "$mode" = user ] && ! systemctl --user show-environment >/dev/null 2>&1; then
		fail "this user has no systemd user instance to run the agent under" \
			"log in as this user directly (ssh, not su), or run this script as root for a system service"
	fi
	if [ -n "$gateway_http" ]; then set_state gateway_http "$gateway_http"; fi
	installed_before=0
	if [ -x "$agent_bin" ]; then installed_before=1; fi

	# The agent is fetched and verified first: a bad download stops the run
	# before a large model is pulled.
	fetch_agent
	ensure_engine
	check_ollama_arch
	ensure_models
	ensure_service_user
	write_config
	write_services
	if [ -n "$new_agent" ]; then install_agent_binary; fi

	state_now=$(unit_state "$(agent_unit_name)")
	if [ -z "$new_agent" ] && [ "$config_changed" = 0 ] && [ "$units_changed" = 0 ] && [ "$state_now" = running ]; then
		ok "nothing changed: agent $(agent_version "$agent_bin") runs with these settings already"
		return 0
	fi
	if [ "$state_now" = missing ] || [ "$installed_before" = 0 ]; then
		step "starting the agent"
	else
		step "restarting the agent"
	fi
	start_agent
	if wait_listed; then
		rc=0
	else
		rc=$?
	fi
	case $rc in
	0)
		ok "the gateway at $gateway lists node $node_id: it accepted the agent's heartbeat"
		say "Done. Check this node any time with: install-node.sh --doctor"
		return 0
		;;
	2)
		if [ -n "$new_agent" ] && [ -n "$old_version" ] && [ -f "$previous_bin" ]; then rollback; fi
		say "problem: the agent did not stay up"
		show_log
		explain_with_doctor
		say "  hint: its log: $(service_log_hint)"
		exit 1
		;;
	3)
		say "problem: the gateway at $gateway refuses this node's key"
		show_log
		explain_with_doctor
		exit 1
		;;
	*)
		say "problem: the gateway has not listed node $node_id after ${o_wait}s"
		show_log
		explain_with_doctor
		say "  hint: the agent keeps trying; check again with: install-node.sh --doctor"
		exit 1
		;;
	esac
}

# ---------------------------------------------------------------------------
# doctor

# doctor_paths picks the install to examine: this user's own, else a
# system-wide one, which a user that is not root can read only in part.
doctor_paths() {
	platform
	if [ "$mode" = user ] && [ ! -f "$env_file" ] && system_install_exists; then
		mode=system
		set_paths
	fi
}

check_rosetta() {
	[ "$os" = darwin ] || return 0
	if [ "$rosetta_shell" = 1 ] || [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || true)" = 1 ]; then
		problem "this shell runs under Rosetta (Intel emulation), so programs started from it may too" \
			"open Terminal without \"Open using Rosetta\" (Finder → Terminal → Get Info) and run this again"
	fi
	check_ollama_arch
}

# check_ollama_arch finds an Intel build of Ollama on an Apple silicon Mac:
# it runs under Rosetta, on the CPU.
check_ollama_arch() {
	[ "$os" = darwin ] || return 0
	find_ollama
	[ -n "$ollama_bin" ] || return 0
	kind=$(file -bL "$ollama_bin" 2>/dev/null || true)
	case $kind in
	*arm64*) ok "Ollama is an Apple silicon build ($ollama_bin)" ;;
	*x86_64*)
		problem "Ollama is an Intel build running under Rosetta ($ollama_bin): it cannot use the GPU, so every token is slow" \
			"install the Apple silicon build of Ollama (run this script again after removing the Intel one)"
		;;
	esac
}

check_clock() {
	url=$gateway_http
	if [ -z "$url" ]; then
		host=${gateway%:*}
		if [ "$tls" = true ]; then url=https://$host; else url=http://$host:8080; fi
	fi
	headers=$(curl -sS -o /dev/null -D - --max-time 5 "$url/healthz" 2>/dev/null </dev/null || true)
	date_header=$(printf '%s\n' "$headers" | tr -d '\r' | sed -n 's/^[Dd][Aa][Tt][Ee]: *//p' | head -n 1)
	theirs=''
	if [ -n "$date_header" ]; then theirs=$(epoch_of_http_date "$date_header" || true); fi
	if [ -z "$theirs" ]; then
		note "the clock could not be compared with the gateway's: nothing answered at $url/healthz (set --gateway-http to the gateway's HTTP address)"
		return 0
	fi
	ours=$(date -u +%s)
	skew=$((ours - theirs))
	ahead='ahead of'
	if [ "$skew" -lt 0 ]; then
		skew=$((-skew))
		ahead=behind
	fi
	if [ "$skew" -gt "$MAX_SKEW" ]; then
		if [ "$os" = darwin ]; then
			hint="turn on System Settings → General → Date & Time → Set time and date automatically"
		else
			hint="turn on network time: timedatectl set-ntp true (or start chrony or ntpd)"
		fi
		problem "this machine's clock is $(seconds "$skew") $ahead the gateway's: TLS certificates and the gateway's records depend on it" "$hint"
	else
		ok "this machine's clock agrees with the gateway's"
	fi
}

doctor() {
	doctor_paths
	if [ ! -f "$env_file" ]; then
		problem "switchyard-agent is not installed here (no $env_file)" \
			"install it: install-node.sh --gateway HOST:PORT --node-id ID --key syn_… --model NAME"
		check_rosetta
		say "$problems problem(s) found"
		exit 1
	fi
	gateway=$(setting SWITCHYARD_GATEWAY)
	tls=$(setting SWITCHYARD_GATEWAY_TLS)
	node_id=$(setting SWITCHYARD_NODE_ID)
	engine=$(setting SWITCHYARD_ENGINE)
	engine_url=$(setting SWITCHYARD_ENGINE_URL)
	gateway_http=$(state gateway_http)

	if [ -x "$agent_bin" ]; then
		ok "switchyard-agent $(agent_version "$agent_bin") is installed: $agent_bin (node $node_id, gateway $gateway)"
	else
		problem "the agent's settings are here, but its binary is missing: $agent_bin" "run the install command again"
	fi
	check_rosetta
	state_now=$(unit_state "$(agent_unit_name)")
	case $state_now in
	running) ok "the agent's service is running" ;;
	failing)
		problem "the agent's service keeps failing" "its log: $(service_log_hint)"
		log_since=$(($(date +%s) - 600))
		show_log
		;;
	*)
		if [ "$mode" = launchd ]; then
			restart_hint="launchctl bootstrap gui/$uid \"$(unit_file_of "$AGENT_LABEL")\""
		elif [ "$mode" = user ]; then
			restart_hint="systemctl --user start $AGENT_UNIT"
		else
			restart_hint="systemctl start $AGENT_UNIT"
		fi
		problem "the agent's service is not running ($state_now)" "start it: $restart_hint"
		;;
	esac
	if [ "$mode" != launchd ] && [ -f "$unit_dir/$AWAKE_UNIT" ] && [ "$state_now" = running ]; then
		if [ "$(unit_state "$AWAKE_UNIT")" = running ]; then
			ok "this machine is kept awake while the agent runs (systemd-inhibit)"
		else
			note "the sleep inhibitor ($AWAKE_UNIT) is not holding: this machine may suspend while it serves; its log: journalctl -u $AWAKE_UNIT"
		fi
	fi
	check_clock

	if [ ! -r "$key_file" ]; then
		problem "the node key ($key_file) is readable only by the agent's user, so the gateway and engine checks cannot run" \
			"run the doctor as root: … | sudo sh -s -- --doctor"
	elif [ -x "$agent_bin" ]; then
		agent_out=$(run_agent_doctor || true)
		agent_problems=$(printf '%s\n' "$agent_out" | grep -c '^problem:' || true)
		problems=$((problems + agent_problems))
		printf '%s\n' "$agent_out" | grep -Ev '^(all checks passed|[0-9]+ problem\(s\) found)$' || true
	elif engine_up; then
		ok "the engine ($engine) answers at $engine_url"
	else
		problem "the engine ($engine) is not responding at $engine_url" "start it, or run the install command again"
	fi

	if [ "$problems" = 0 ]; then
		say "all checks passed"
		exit 0
	fi
	say "$problems problem(s) found"
	exit 1
}

# ---------------------------------------------------------------------------
# uninstall

# remove_models removes the models this script pulled; the engine must still
# be running for that.
remove_models() {
	pulled=$(state models_pulled)
	[ -n "$pulled" ] || return 0
	find_ollama
	if [ -z "$ollama_bin" ]; then
		note "the models this script pulled stay ($pulled): no ollama command to remove them with"
		return 0
	fi
	engine_url=$(setting SWITCHYARD_ENGINE_URL)
	engine_url=${engine_url:-$OLLAMA_URL}
	old_ifs=$IFS
	IFS=,
	for model in $pulled; do
		IFS=$old_ifs
		if ollama_cli rm "$model" >/dev/null 2>&1; then
			ok "removed the model $model"
		else
			note "could not remove the model $model (ollama rm $model)"
		fi
	done
	IFS=$old_ifs
}

# remove_engine removes Ollama when this script installed it.
remove_engine() {
	case $(state engine_installed) in
	ollama-app)
		if [ -d "$HOME/Applications/Ollama.app" ]; then
			rm -rf "$HOME/Applications/Ollama.app"
			ok "removed Ollama (~/Applications/Ollama.app; ~/.ollama keeps any models pulled by hand)"
		fi
		;;
	ollama-linux)
		if [ "$mode" != system ]; then
			note "Ollama was installed system-wide; an administrator removes it with: systemctl disable --now ollama; rm -rf /etc/systemd/system/ollama.service $(command -v ollama || echo /usr/local/bin/ollama) /usr/local/lib/ollama /usr/share/ollama; userdel ollama"
			return 0
		fi
		find_ollama
		svc disable --now ollama.service >/dev/null 2>&1 || true
		rm -f "$R/etc/systemd/system/ollama.service"
		if [ -n "$ollama_bin" ]; then rm -f "$ollama_bin"; fi
		rm -rf "$R/usr/local/lib/ollama" "$R/usr/share/ollama"
		if id ollama >/dev/null 2>&1; then userdel ollama >/dev/null 2>&1 || true; fi
		svc daemon-reload 2>/dev/null || true
		ok "removed Ollama and its models"
		;;
	esac
}

remove_service() {
	if [ "$mode" = launchd ]; then
		[ -f "$(unit_file_of "$1")" ] || return 0
		launchctl bootout "gui/$uid/$1" 2>/dev/null || true
		rm -f "$(unit_file_of "$1")"
		ok "removed the launchd job $1"
	else
		[ -f "$unit_dir/$1" ] || return 0
		svc disable --now "$1" >/dev/null 2>&1 || svc stop "$1" >/dev/null 2>&1 || true
		rm -f "$unit_dir/$1"
		ok "removed the service $1"
	fi
}

uninstall() {
	platform
	if [ "$mode" = user ] && [ ! -f "$state_file" ] && [ ! -f "$env_file" ] && system_install_exists; then
		fail "switchyard-agent is installed system-wide here" "run this with sudo to remove it"
	fi
	if [ ! -f "$env_file" ] && [ ! -f "$state_file" ] && [ ! -e "$agent_bin" ]; then
		say "nothing to remove: switchyard-agent is not installed here"
		return 0
	fi
	node_id=$(setting SWITCHYARD_NODE_ID)
	if [ "$keep_engine" = 0 ]; then remove_models; fi
	if [ "$mode" = launchd ]; then
		remove_service "$AGENT_LABEL"
		if [ "$keep_engine" = 0 ]; then remove_service "$OLLAMA_LABEL"; fi
		rm -f "$agent_log_file"
		if [ "$keep_engine" = 0 ]; then rm -f "$ollama_log_file"; fi
	else
		remove_service "$AGENT_UNIT"
		remove_service "$AWAKE_UNIT"
		if [ "$keep_engine" = 0 ]; then remove_service "$OLLAMA_UNIT"; fi
		svc daemon-reload 2>/dev/null || true
	fi
	if [ "$keep_engine" = 0 ]; then remove_engine; fi
	created_user=$(state created_user)
	rm -f "$agent_bin" "$previous_bin" "$env_file" "$key_file" "$state_file"
	if [ "$keep_engine" = 1 ] && [ -d "$data_dir/ollama" ]; then
		# The Ollama service kept runs as the agent's user, from its
		# data folder.
		created_user=''
	else
		rm -rf "$data_dir" "$conf_dir"
	fi
	ok "removed the agent, its settings and its key"
	if [ -n "$created_user" ] && id "$created_user" >/dev/null 2>&1; then
		userdel "$created_user" >/dev/null 2>&1 || true
		ok "removed the system user $created_user"
	fi
	if [ "$keep_engine" = 1 ]; then note "the engine and the models stay (--keep-engine)"; fi
	say "switchyard-agent is removed. An administrator can now revoke the node's key: RevokeNodeKey {\"node_id\":\"${node_id:-…}\"}"
}

main() {
	parse_args "$@"
	case $action in
	help) usage ;;
	doctor) doctor ;;
	uninstall) uninstall ;;
	install) install ;;
	esac
}

main "$@"
