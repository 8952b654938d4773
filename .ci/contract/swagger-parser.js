// Validates an OpenAPI document with @apidevtools/swagger-parser (schema
// and semantics: references, duplicate operation ids, path parameters).
const SwaggerParser=require('@apidevtools/swagger-parser');
SwaggerParser.validate(process.argv[2]).then(()=>console.log('swagger-parser: valid')).catch(e=>{console.error('swagger-parser:',e.message);process.exit(1)});
