// A Node CrossGuard pack, as AWSGuard is built: policies declared advisory, the pack constructed with an
// initial config that makes them all mandatory, and one policy with a config schema default.
const { PolicyPack } = require("@pulumi/policy");

new PolicyPack(
    "node-test-pack",
    {
        policies: [
            {
                name: "region-allowed",
                description: "Resources stay in the allowed region.",
                enforcementLevel: "advisory",
                configSchema: { properties: { region: { type: "string", default: "me-central-1" } } },
                validateResource: (args, reportViolation) => {
                    const region = args.props.region;
                    const allowed = args.getConfig().region;
                    if (region !== undefined && region !== allowed) {
                        reportViolation(`region is ${region}; allowed: ${allowed}`);
                    }
                },
            },
        ],
    },
    { all: "mandatory" },
);
